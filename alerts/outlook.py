"""What an alert tells the operator beyond the event itself, read from the database: when the
providers that are out should be back (`alerts.estimate` on their incidents), what the cloud
has cost today and this month, and the provider's runbook lines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Q, Sum

from alerts.estimate import Outage, earliest, recovery_estimate
from billing.models import CallRecord
from billing.retention import day_start, local_day
from billing.selectors import cloud_q
from providers.models import FailoverPolicy, Incident, Provider

# How many of a provider's last incidents its estimate is drawn from.
RECOVERY_SAMPLE = 5


def past_incident_lengths(provider: str, *, limit: int = RECOVERY_SAMPLE) -> list[float]:
    """How long the provider's last closed incidents lasted, newest first. Those an operator
    or a restart ended are left out: they say nothing of how long the provider takes."""
    rows = (
        Incident.objects.filter(provider=provider, ended_at__isnull=False, closed_reason="")
        .order_by("-started_at", "-pk")
        .values_list("started_at", "ended_at")[:limit]
    )
    return [(ended - started).total_seconds() for started, ended in rows if ended is not None]


def _open_incident_start(provider: str) -> float | None:
    started = (
        Incident.objects.filter(provider=provider, ended_at__isnull=True)
        .order_by("-started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    return started.timestamp() if started is not None else None


@dataclass(frozen=True, slots=True)
class Outlook:
    headline: str  # "Recovery estimated: 8 minutes"
    sentence: str  # the headline with how it was estimated
    data: dict[str, Any]


def recovery_outlook(outages: Sequence[Outage], *, now: float) -> Outlook:
    """The static tier's end: the first of the providers out expected back, and how that was
    estimated. An outage is dated from its open incident (the breaker's last opening, when the
    incident isn't written yet): a breaker re-opened after a failed probe is the same outage."""
    estimates = []
    for outage in outages:
        started = _open_incident_start(outage.provider) or outage.started_at
        dated = Outage(outage.provider, outage.next_probe_at, started)
        estimates.append(recovery_estimate(dated, past_incident_lengths(outage.provider), now=now))
    first = earliest(estimates)
    if first is None:
        return Outlook(
            "Recovery: no estimate",
            "Recovery: no estimate (no provider is waiting on its breaker's next probe).",
            {"recovery_estimate_s": None},
        )
    return Outlook(
        first.headline,
        f"{first.headline} ({first.provider}: {first.basis}).",
        {
            "recovery_estimate_s": round(first.in_s),
            "recovery_provider": first.provider,
            "recovery_basis": first.basis,
        },
    )


def cloud_spend_today_and_month(policy: FailoverPolicy, now: datetime) -> tuple[Decimal, Decimal]:
    """What cloud providers cost today and this month, the reports' days in the policy's time
    zone (`billing.retention` `local_day`, `day_start`), in its currency: the ledger's
    "answered by a cloud provider" (`cloud_q`)."""
    zone = ZoneInfo(policy.time_zone)
    today = local_day(now, zone)
    day, month = day_start(today, zone), day_start(today.replace(day=1), zone)
    spent = (
        CallRecord.objects.filter(cloud_q(), created_at__gte=month)
        .filter(~Q(cost=0))
        .aggregate(month=Sum("cost"), today=Sum("cost", filter=Q(created_at__gte=day)))
    )
    return spent["today"] or Decimal("0"), spent["month"] or Decimal("0")


def spend_sentence(
    policy: FailoverPolicy, now: datetime | None = None
) -> tuple[str, dict[str, str]]:
    today, month = cloud_spend_today_and_month(policy, now or datetime.now(UTC))
    currency = policy.currency
    return (
        f"Cloud spend: {today:.4f} {currency} today, {month:.4f} {currency} this month.",
        {"cloud_spend_today": _plain(today), "cloud_spend_month": _plain(month)},
    )


def _plain(amount: Decimal) -> str:
    """An amount without the database's trailing zeros: 0.0123, not 0.0123000000000000."""
    return format(amount.normalize(), "f")


def runbook_lines(provider: str) -> list[str]:
    """The provider's runbook, a step a line, as the operator wrote it in the admin."""
    text = Provider.objects.filter(name=provider).values_list("runbook", flat=True).first()
    return [line.rstrip() for line in (text or "").splitlines() if line.strip()]
