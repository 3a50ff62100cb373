"""The reports: spend, cloud share, static coverage and incidents over a range of days in the
policy's time zone, by day or by month.

Each reads the roll-ups (`DailyUsage`, `IncidentUsage`) for what is rolled up and the ledger for
the rest (`billing.retention.live_records`), so a range reaching past the retention still adds
up and today is live. Both are summed in the database per day; days are folded into months
here, over those sums. The command (`manage.py report`) and the control room's page take their
options through `report_query` and their CSV from `billing.report_formats`: one code path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Q

from billing.models import DailyUsage, IncidentUsage, Outcome, Tier
from billing.report_options import Report, ReportQuery
from billing.retention import (
    consistent_read,
    incident_sums,
    ledger_by_day,
    ledger_sums,
    live_records,
    roll_up_state,
    rolled_sums,
)
from billing.roi import money as money_words
from providers.models import Incident

ANSWERED = (Tier.PRIMARY, Tier.SECONDARY)
REACHED_STATIC = (Tier.STATIC, Tier.DEGRADED)
CENTS = Decimal("0.00000001")  # the ledger's precision


@dataclass
class Totals:
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal("0")
    cache_hits: int = 0
    static_answers: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def add(self, sums: Mapping[str, Any]) -> None:
        """Add a row of `ledger_sums` or `rolled_sums`."""
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + (sums[f"total_{item.name}"] or 0))

    def __iadd__(self, other: Totals) -> Totals:
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))
        return self


def usage(query: ReportQuery, keys: tuple[str, ...], where: Q | None = None) -> dict[tuple, Totals]:
    """The measures per (period, *keys) over the range: the roll-ups' days plus the records not
    rolled up. `keys` and `where` name the roll-up's dimensions (provider, client, tier,
    outcome, is_cloud), which the records carry under the same names."""
    where = where or Q()
    totals: defaultdict[tuple, Totals] = defaultdict(Totals)
    with consistent_read():
        rolled = (
            DailyUsage.objects.filter(where, day__gte=query.since, day__lte=query.until)
            .order_by()
            .values("day", *keys)
            .annotate(**rolled_sums())
        )
        records = live_records(query.start, query.end, roll_up_state())
        live = (
            ledger_by_day(records, query.zone)
            .filter(where)
            .order_by()
            .values("day", *keys)
            .annotate(**ledger_sums())
        )
        for row in [*rolled, *live]:
            totals[(query.bucket(row["day"]), *(row[key] for key in keys))].add(row)
    return dict(totals)


def pct(part: int, whole: int) -> float | None:
    return None if not whole else round(100 * part / whole, 2)


def money(amount: Decimal) -> Decimal:
    return amount.quantize(CENTS)


def spend_report(query: ReportQuery) -> Report:
    currency = query.policy.currency
    rows, total = [], Totals()
    for (bucket, who), sums in sorted(usage(query, (query.group,)).items()):
        rows.append(
            {
                "period": query.label(bucket),
                query.group: who,
                "requests": sums.requests,
                "tokens_in": sums.tokens_in,
                "tokens_out": sums.tokens_out,
                "cost": money(sums.cost),
                "currency": currency,
            }
        )
        total += sums
    columns = ("period", query.group, "requests", "tokens_in", "tokens_out", "cost", "currency")
    return Report(
        query=query,
        title=f"Spend per {query.group} per {query.by}",
        columns=columns,
        rows=rows,
        headline=f"{total.requests:,} request{'s' if total.requests != 1 else ''}, "
        f"{total.tokens:,} tokens, "
        f"{money_words(total.cost)} {currency} in all.",
        summary={"requests": total.requests, "tokens": total.tokens, "cost": money(total.cost)},
    )


def cloud_verdict(share: float | None, target: float) -> str:
    if share is None:
        return "no requests"
    return "on target" if share <= target else "above target"


def coverage_verdict(share: float | None, target: float) -> str:
    if share is None:
        return "no requests"
    return "on target" if share >= target else "below target"


def _grouped(query: ReportQuery, keys: tuple[str, ...], where: Q) -> dict[tuple, dict]:
    """usage() per (period, group) with the first key split out: {(period, who): {key: Totals}}."""
    split: defaultdict[tuple, dict] = defaultdict(dict)
    for (bucket, first, *rest), sums in usage(query, keys, where).items():
        split[(bucket, *rest)][first] = sums
    return split


def _row_start(query: ReportQuery, bucket: date, rest: tuple) -> dict[str, Any]:
    row: dict[str, Any] = {"period": query.label(bucket)}
    if query.group:
        row[query.group] = rest[0]
    return row


def cloud_share_report(query: ReportQuery) -> Report:
    target = query.policy.cloud_share_target_pct
    keys = ("is_cloud", query.group) if query.group else ("is_cloud",)
    rows: list[dict[str, Any]] = []
    overall = [0, 0, 0, 0]  # answered, cloud, answered tokens, cloud tokens

    def figures(answered: int, cloud: int, tokens: int, cloud_tokens: int) -> dict[str, Any]:
        share = pct(cloud, answered)
        return {
            "answered": answered,
            "cloud_requests": cloud,
            "cloud_share_pct": share,
            "answered_tokens": tokens,
            "cloud_tokens": cloud_tokens,
            "cloud_token_share_pct": pct(cloud_tokens, tokens),
            "target_pct": target,
            "verdict": cloud_verdict(share, target),
        }

    where = Q(tier__in=ANSWERED, outcome=Outcome.OK)
    for (bucket, *rest), by_cloud in sorted(_grouped(query, keys, where).items()):
        on, off = by_cloud.get(True, Totals()), by_cloud.get(False, Totals())
        counts = (on.requests + off.requests, on.requests, on.tokens + off.tokens, on.tokens)
        row = _row_start(query, bucket, tuple(rest))
        row.update(figures(*counts))
        rows.append(row)
        overall = [a + b for a, b in zip(overall, counts, strict=True)]
    summary = figures(*overall)
    share = summary["cloud_share_pct"]
    said = (
        "No request answered by a provider"
        if share is None
        else f"Cloud share {share:.2f} % of {overall[0]:,} answered requests"
    )
    return Report(
        query=query,
        title=f"Cloud share per {query.by}" + (f" per {query.group}" if query.group else ""),
        columns=(*_lead(query), *summary),
        rows=rows,
        headline=f"{said} (target at most {target:g} %): {summary['verdict']}.",
        summary=summary,
    )


def coverage_report(query: ReportQuery) -> Report:
    target = query.policy.static_coverage_target_pct
    keys = ("tier", query.group) if query.group else ("tier",)
    rows, matched, degraded = [], 0, 0

    def figures(static: int, fell: int) -> dict[str, Any]:
        share = pct(static, static + fell)
        return {
            "reached_static": static + fell,
            "static_answers": static,
            "degraded": fell,
            "coverage_pct": share,
            "target_pct": target,
            "verdict": coverage_verdict(share, target),
        }

    for (bucket, *rest), by_tier in sorted(
        _grouped(query, keys, Q(tier__in=REACHED_STATIC)).items()
    ):
        static = by_tier.get(Tier.STATIC.value, Totals()).requests
        fell = by_tier.get(Tier.DEGRADED.value, Totals()).requests
        row = _row_start(query, bucket, tuple(rest))
        row.update(figures(static, fell))
        rows.append(row)
        matched, degraded = matched + static, degraded + fell
    summary = figures(matched, degraded)
    share = summary["coverage_pct"]
    said = (
        "No request reached the static tier"
        if share is None
        else f"Static coverage {share:.2f} % of {matched + degraded:,} requests that reached "
        "the static tier"
    )
    return Report(
        query=query,
        title=f"Static coverage per {query.by}" + (f" per {query.group}" if query.group else ""),
        columns=(*_lead(query), *summary),
        rows=rows,
        headline=f"{said} (target at least {target:g} %): {summary['verdict']}.",
        summary=summary,
    )


def _lead(query: ReportQuery) -> tuple[str, ...]:
    return ("period", query.group) if query.group else ("period",)


TIER_COLUMNS = tuple(tier.value for tier in Tier)


def incidents_report(query: ReportQuery) -> Report:
    currency = query.policy.currency
    with consistent_read():
        incidents = list(
            Incident.objects.filter(started_at__lt=query.end)
            .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=query.start))
            .order_by("started_at", "pk")
        )
        rolled: defaultdict[int, list[IncidentUsage]] = defaultdict(list)
        for usage in IncidentUsage.objects.filter(incident__in=[i.pk for i in incidents]):
            rolled[usage.incident_id].append(usage)
        state = roll_up_state()
        rows = []
        for incident in incidents:
            served = dict.fromkeys(TIER_COLUMNS, 0)
            cost = Decimal("0")
            for usage in rolled[incident.pk]:
                served[usage.tier] += usage.requests
                cost += usage.cloud_cost
            records = live_records(incident.started_at, incident.ended_at, state)
            for row in incident_sums(records, incident):
                served[row["tier"]] += row["requests"]
                cost += row["cloud_cost"] or Decimal("0")
            rows.append(_incident_row(query, incident, served, cost))
    total_s = sum(row["length_s"] for row in rows)
    total_cost = sum((row["cloud_cost"] for row in rows), Decimal("0"))
    return Report(
        query=query,
        title="Incidents",
        columns=tuple(_incident_row(query, Incident(started_at=query.now), {}, Decimal("0"))),
        rows=rows,
        headline=f"{len(rows)} incident{'s' if len(rows) != 1 else ''}, "
        f"{length_words(total_s)} out in all, cloud cost {money_words(total_cost)} {currency}.",
        summary={"incidents": len(rows), "length_s": total_s, "cloud_cost": money(total_cost)},
    )


def _incident_row(
    query: ReportQuery, incident: Incident, served: dict[str, int], cost: Decimal
) -> dict[str, Any]:
    ended = incident.ended_at
    return {
        "provider": incident.provider,
        "started_at": incident.started_at.astimezone(query.zone).isoformat(timespec="seconds"),
        "ended_at": ended.astimezone(query.zone).isoformat(timespec="seconds") if ended else "",
        "length_s": int(((ended or query.now) - incident.started_at).total_seconds()),
        "ongoing": ended is None,
        "reason": incident.reason,
        "closed_reason": incident.closed_reason,
        **{f"requests_{tier}": served.get(tier, 0) for tier in TIER_COLUMNS},
        "requests": sum(served.values()),
        "cloud_cost": money(cost),
        "currency": query.policy.currency,
    }


def length_words(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


BUILDERS = {
    "spend": spend_report,
    "cloud-share": cloud_share_report,
    "coverage": coverage_report,
    "incidents": incidents_report,
}


def report_build(query: ReportQuery) -> Report:
    return BUILDERS[query.report](query)
