"""Which events become alerts, and when: the flap window, the cooldown, the recovery.

- A provider's breaker opening starts an incident (`providers.incidents`). The failover alert
  waits out the policy's flap window: a switch that came back within it raises nothing (the
  event is kept, suppressed "flap").
- One alert per event key per cooldown (600 s): ten failovers in five minutes are one message;
  the other nine are kept, suppressed "cooldown".
- An incident that was alerted gets a recovery alert when it ends, with its length and what the
  cloud cost while it lasted.
- Static tier active, credentials rejected, budgets at 50 / 85 / 100 %, cloud share above
  target and the sentinel stopped are raised where they are seen.

Every event is kept with its outcome. Raising never blocks a request: callers are background
jobs, or hand over with `note_*` from the request path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from alerts import dispatch
from alerts.estimate import Outage
from alerts.models import AlertEvent
from alerts.outlook import recovery_outlook, runbook_lines
from billing.models import Budget, CallRecord
from billing.reports import ANSWERED
from billing.selectors import cloud_q
from providers.models import FailoverPolicy, Incident, Provider
from providers.selectors import policy_get

logger = logging.getLogger(__name__)

SENT = ("pending", "delivered", "partly_delivered", "failed", "no_channel")
# Cloud share is judged on a day with at least this many requests.
CLOUD_SHARE_MIN_REQUESTS = 20
_raising = threading.Lock()  # SQLite (the embedded mode) has no row locks to serialize on


def alert_raise(
    *,
    kind: str,
    severity: str,
    key: str,
    title: str,
    message: str,
    data: dict[str, Any] | None = None,
    once: bool = False,
    local: bool = False,
) -> AlertEvent:
    """Keep the event; deliver it unless one with the same key went out within the cooldown
    (or ever, with `once`). Serialized across processes on the policy row's lock."""
    with _raising, transaction.atomic():
        policy = FailoverPolicy.objects.select_for_update().get(pk=policy_get().pk)
        earlier = AlertEvent.objects.filter(key=key, status__in=SENT)
        if not once:
            since = timezone.now() - timedelta(seconds=policy.alert_cooldown_s)
            earlier = earlier.filter(created_at__gte=since)
        duplicate = earlier.exists()
        event = AlertEvent.objects.create(
            kind=kind,
            severity=severity,
            key=key,
            title=title,
            message=message,
            data=data or {},
            status="suppressed" if duplicate else "pending",
            suppressed_reason=("already raised" if once else "cooldown") if duplicate else "",
        )
        if not duplicate:
            transaction.on_commit(
                lambda: dispatch.hand_over(dispatch.DELIVER_ALERT, event.pk, local=local)
            )
    return event


def alert_suppress(*, kind: str, severity: str, key: str, title: str, message: str,
                   reason: str, data: dict[str, Any] | None = None) -> AlertEvent:  # fmt: skip
    """Keep an event that raises no alert, with why."""
    return AlertEvent.objects.create(
        kind=kind,
        severity=severity,
        key=key,
        title=title,
        message=message,
        data=data or {},
        status="suppressed",
        suppressed_reason=reason,
    )


def _next_provider(name: str) -> str:
    """The next enabled provider by priority: who should serve, whether it can or not."""
    later = Provider.objects.filter(enabled=True).exclude(name=name).order_by("priority", "name")
    first = later.first()
    return first.name if first is not None else ""


# The latest requests since an incident began that say what serves in its place.
SERVING_SAMPLE = 20
_FALLBACK_TIERS = {
    "cache": "from cached answers",
    "static": "from the static answers",
    "degraded": "with the degradation message",
}


def _serving_since(incident: Incident) -> tuple[str, bool] | None:
    """What really answered the latest requests since the incident began, other than the
    provider that is out, from the call ledger: (the sentence, whether a provider serves).
    None before any such request is in the ledger."""
    latest = (
        CallRecord.objects.filter(created_at__gte=incident.started_at)
        .exclude(final_provider=incident.provider)
        .exclude(outcome="rejected")  # the client's mistake says nothing of who serves
        .order_by("-created_at", "-id")
        .values_list("tier", "final_provider")[:SERVING_SAMPLE]
    )
    rows = list(latest)
    if not rows:
        return None
    providers = Counter(name for tier, name in rows if tier in ("primary", "secondary") and name)
    fallbacks = Counter(tier for tier, name in rows if tier in _FALLBACK_TIERS)
    if providers:
        name, served = providers.most_common(1)[0]
        sentence = f"Traffic moves to {name}."
        if served < len(rows):
            sentence = f"Traffic moves to {name} ({served} of the last {len(rows)} requests)."
        if fallbacks:
            tier = fallbacks.most_common(1)[0][0]
            sentence += f" Others are answered {_FALLBACK_TIERS[tier]}."
        return sentence, True
    if fallbacks:
        tier = fallbacks.most_common(1)[0][0]
        return f"No provider serves: requests are answered {_FALLBACK_TIERS[tier]}.", False
    return "No provider serves, and requests get no answer.", False


def incident_opened(incident: Incident) -> None:
    """Wait out the flap window, then judge (a scheduled one-off job)."""
    dispatch.hand_over(dispatch.FAILOVER_CHECK, incident.pk, countdown=policy_get().flap_window_s)


def failover_check(incident_id: int) -> AlertEvent | None:
    incident = Incident.objects.filter(pk=incident_id).first()
    if incident is None:
        return None
    key = f"failover:{incident.provider}"
    title = f"Failover: {incident.provider} is out"
    data = {"incident_id": incident.pk, "provider": incident.provider, "reason": incident.reason}
    if incident.ended_at is not None:
        # Back before the flap window (counted from the incident's start) was out: a switch
        # that came back, whatever the breaker's own minimum open time made it last. Unless an
        # operator's reset or a restart ended it: that says nothing of the provider.
        ended_by = incident.closed_reason or "flap"
        how = {"flap": "was back", "operator": "was reset by an operator", "restart":
               "was closed at a restart"}.get(ended_by, "was closed")  # fmt: skip
        return alert_suppress(
            kind="failover",
            severity="warning",
            key=key,
            title=title,
            message=f"{incident.provider} {how} after {incident.duration_s:.0f} s.",
            reason=ended_by,
            data=data,
        )
    serving = _serving_since(incident)
    if serving is None:  # no request since it began: who serves is only who should
        successor = _next_provider(incident.provider)
        serving = (
            (f"Traffic should move to {successor}.", True)
            if successor
            else ("No provider is left.", False)
        )
    where, provider_serves = serving
    runbook = runbook_lines(incident.provider)
    if runbook:
        data["runbook"] = runbook
    return alert_raise(
        kind="failover",
        severity="warning" if provider_serves else "critical",
        key=key,
        title=title,
        message=(
            f"{incident.provider}'s circuit breaker opened at "
            f"{incident.started_at:%Y-%m-%d %H:%M:%S %Z} ({incident.reason or 'failures'}). "
            f"{where}"
        ),
        data=data,
    )


def cloud_spend_between(started: Any, ended: Any) -> Decimal:
    cloud = Provider.objects.filter(is_local=False).values_list("name", flat=True)
    total = CallRecord.objects.filter(
        created_at__gte=started, created_at__lte=ended, final_provider__in=list(cloud)
    ).aggregate(total=Sum("cost"))["total"]
    return total or Decimal("0")


def incident_closed(incident: Incident) -> AlertEvent | None:
    """A recovery alert for an incident whose failover was alerted."""
    alerted = AlertEvent.objects.filter(
        kind="failover", data__incident_id=incident.pk, status__in=SENT
    ).exists()
    if not alerted or incident.ended_at is None:
        return None
    duration = incident.duration_s or 0
    spend = cloud_spend_between(incident.started_at, incident.ended_at)
    minutes, seconds = divmod(round(duration), 60)
    return alert_raise(
        kind="recovery",
        severity="info",
        key=f"recovery:{incident.provider}:{incident.pk}",
        title=f"Recovered: {incident.provider} is back",
        message=(
            f"{incident.provider} is serving again after {minutes} min {seconds} s. "
            f"Cloud spend during the incident: {spend:.4f} {policy_get().currency}."
        ),
        data={
            "incident_id": incident.pk,
            "provider": incident.provider,
            "duration_s": round(duration, 1),
            "cloud_spend": str(spend),
        },
    )


def budget_crossed(budget_id: int, used_pct: float, period: str) -> AlertEvent | None:
    """A budget past its warning (50 %), high-priority-only (85 %) or hard-stop (100 %) level:
    one alert per budget, level and period, the highest level reached (the watchdog asks every
    30 s; a level already raised this period adds nothing, not even a suppressed row)."""
    budget = Budget.objects.filter(pk=budget_id).select_related("provider", "client_app").first()
    if budget is None:
        return None
    level = 100 if used_pct >= budget.hard_stop_pct else (
        85 if used_pct >= budget.high_priority_only_pct else 50
    )  # fmt: skip
    if used_pct < budget.warn_pct and level == 50:
        return None
    key = f"budget:{budget.pk}:{level}:{period}"
    if AlertEvent.objects.filter(key=key, status__in=SENT).exists():
        return None
    what = {100: "spending stopped", 85: "only high-priority requests go to paid providers",
            50: f"past its warning level of {budget.warn_pct} %"}[level]  # fmt: skip
    named = f"{budget} {policy_get().currency}" if budget.unit == "money" else str(budget)
    return alert_raise(
        kind="budget",
        severity="critical" if level == 100 else "warning",
        key=key,
        title=f"Budget at {level} %: {named}",
        message=f"{named} is at {used_pct:.0f} % for {period}: {what}.",
        data={"budget_id": budget.pk, "used_pct": round(used_pct, 1), "level": level},
        once=True,
    )


def cloud_share_check() -> AlertEvent | None:
    """Today's (in the policy's time zone) share of the requests a provider answered that a
    cloud provider answered, against the target: the reports' definition."""
    policy = policy_get()
    since = timezone.localtime(timezone=ZoneInfo(policy.time_zone)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    answered = CallRecord.objects.filter(created_at__gte=since, tier__in=ANSWERED, outcome="ok")
    today = answered.aggregate(total=Count("id"), cloud=Count("id", filter=cloud_q()))
    total = today["total"] or 0
    if total < CLOUD_SHARE_MIN_REQUESTS:
        return None
    share = 100 * today["cloud"] / total
    if share <= policy.cloud_share_target_pct:
        return None
    return alert_raise(
        kind="cloud_share",
        severity="warning",
        key=f"cloud_share:{since:%Y-%m-%d}",
        title=f"Cloud share {share:.1f} % (target {policy.cloud_share_target_pct:g} %)",
        message=f"{today['cloud']} of the {total} requests providers answered today were "
        "answered by cloud providers.",
        data={"share_pct": round(share, 1), "requests": total},
    )


def sentinel_down(since: str, allowed_s: float) -> AlertEvent:
    return alert_raise(
        kind="sentinel_down",
        severity="critical",
        key="sentinel_down",
        title="The health sentinel has stopped",
        message=(
            f"No health check has run for over {allowed_s:.0f} s (last run: {since}). Are the "
            "Celery worker and beat running?"
        ),
        local=True,  # the workers are what may have stopped: deliver from here
    )


def static_tier_active(
    reason: str, outages: Sequence[Outage] = (), *, now: float | None = None
) -> AlertEvent:
    """The tertiary fallback serves: with when the first of the providers out (their breakers'
    next probes, `outages`) should be back, and how that was estimated."""
    outlook = recovery_outlook(outages, now=time.time() if now is None else now)
    return alert_raise(
        kind="static_tier",
        severity="critical",
        key="static_tier",
        title=f"Tertiary fallback active. {outlook.headline}",
        message=(
            "No provider is answering: static answers only. Requests are answered from the "
            f"static tier or the apology ({reason}).\n{outlook.sentence}"
        ),
        data={"reason": reason, **outlook.data},
    )


def credentials_rejected(provider: str, detail: str) -> AlertEvent:
    return alert_raise(
        kind="credentials",
        severity="critical",
        key=f"credentials:{provider}",
        title=f"Credentials rejected by {provider}",
        message=f"{provider} refused our key: {detail[:300]}",
        data={"provider": provider},
    )


class _Throttle:
    """At most one hand-over per key per `every_s` from this process: a request path that sees
    the same trouble a thousand times a second hands it over once."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self.every_s) < self.every_s:
                return False
            self._last[key] = now
            return True

    def clear(self) -> None:
        with self._lock:
            self._last.clear()


request_throttle = _Throttle(every_s=10.0)


def ledger_rows_rejected(count: int, path: str, error: str) -> AlertEvent:
    """Call records the database refused, set aside in a file; the others were written."""
    return alert_raise(
        kind="ledger_rejected",
        severity="critical",
        # One key for them all: a bug that spoils every record sets some aside every second,
        # and that is one alert per cooldown (each file's event is kept, with its path).
        key="ledger_rejected",
        title=f"Call ledger: {count} record{'s' if count != 1 else ''} refused by the database",
        message=(
            f"The database refused {count} call record{'s' if count != 1 else ''} ({error[:300]}); "
            f"they are kept in {path}, the others were written. Once the cause is fixed, move "
            "the file into ledger-spill/ and it is written at the next start."
        ),
        data={"count": count, "path": path, "error": error[:500]},
    )
