"""The charts page: the ledger's last day by tier and by provider latency, and its last month of
spend, drawn on the server as inline SVG (charts.py) with a table of the same numbers.

The queries group in the database by hour or day in the current time zone (TruncHour and
TruncDate, which both SQLite and PostgreSQL run), except p95 latency: no portable SQL
percentile, so the last day's latencies of answered requests come back as one bounded
values_list and the percentile is taken in Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import Decimal
from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate, TruncHour
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import dateformat, timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from billing.models import CallRecord, Outcome, Tier
from control_room import charts

PERMISSION = "billing.view_callrecord"
HOURS = 24
DAYS = 30
P95 = 95

# The status panel's colours where it has them (serving primary green, secondary orange, the
# fallbacks red), told apart here because they stack side by side.
TIER_COLORS = {
    Tier.PRIMARY.value: "#2e7d32",
    Tier.SECONDARY.value: "#ef6c00",
    Tier.CACHE.value: "#1565c0",
    Tier.STATIC.value: "#6a1b9a",
    Tier.DEGRADED.value: "#ba2121",
    Tier.NONE.value: "#757575",
}


def urls(site: AdminSite) -> list[URLPattern]:
    @require_GET
    def charts_page(request: HttpRequest) -> TemplateResponse:
        return charts_view(request, site=site)

    return [path("control/charts/", site.admin_view(charts_page), name="control-charts")]


@dataclass(frozen=True)
class Chart:
    """One chart as the template shows it: the drawing and its numbers as a table."""

    slug: str
    title: str
    svg: SafeString
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    footer: Sequence[Any] = field(default_factory=tuple)
    summary: str = ""


def charts_view(request: HttpRequest, *, site: AdminSite) -> TemplateResponse:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied("The charts read the call ledger: they take its view permission.")
    now = timezone.now()
    zone = timezone.get_current_timezone()
    hours = hour_slots(now, zone, HOURS)
    days = day_slots(now, zone, DAYS)
    context = {
        **site.each_context(request),
        "title": "Charts",
        "timezone_name": timezone.get_current_timezone_name(),
        "now": now,
        "charts": [
            tier_chart(hours, zone),
            latency_chart(hours, zone),
            spend_chart(days, zone),
        ],
        "ledger_url": reverse("admin:billing_callrecord_changelist") + "?recent=24h",
    }
    return TemplateResponse(request, "control/charts.html", context)


def hour_slots(now: datetime, zone: tzinfo, count: int) -> list[datetime]:
    """The starts of the last `count` local hours, oldest first, the current one last.

    Stepped in UTC, so a daylight-saving change makes an hour repeat or vanish on the axis as it
    did on the wall clock, rather than shifting every slot."""
    current = timezone.localtime(now, zone).replace(minute=0, second=0, microsecond=0)
    start = current.astimezone(UTC)
    return [(start - timedelta(hours=back)).astimezone(zone) for back in range(count - 1, -1, -1)]


def day_slots(now: datetime, zone: tzinfo, count: int) -> list[date]:
    today = timezone.localtime(now, zone).date()
    return [today - timedelta(days=back) for back in range(count - 1, -1, -1)]


def hour_label(moment: datetime) -> str:
    return dateformat.format(moment, "H:i")


def hour_row_label(moment: datetime) -> str:
    return dateformat.format(moment, "D j M, H:i")


def tier_chart(hours: Sequence[datetime], zone: tzinfo) -> Chart:
    counts: dict[tuple[datetime, str], int] = {
        (row["hour"], row["tier"]): row["n"]
        for row in CallRecord.objects.filter(created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at", tzinfo=zone))
        .order_by()
        .values("hour", "tier")
        .annotate(n=Count("id"))
    }
    tiers = [tier.value for tier in Tier]
    series = {tier: [counts.get((hour, tier), 0) for hour in hours] for tier in tiers}
    totals = [sum(series[tier][i] for tier in tiers) for i in range(len(hours))]
    title = f"Requests per tier per hour, last {len(hours)} hours"
    return Chart(
        slug="tiers",
        title=title,
        svg=charts.stacked_bar_chart(
            title=title,
            labels=[hour_label(hour) for hour in hours],
            series=series,
            colors=TIER_COLORS,
            unit="requests",
            label_every=3,
        ),
        columns=["Hour", *tiers, "total"],
        rows=[
            [hour_row_label(hour), *(series[tier][i] for tier in tiers), totals[i]]
            for i, hour in enumerate(hours)
        ],
        footer=["All hours", *(sum(series[tier]) for tier in tiers), sum(totals)],
    )


def latency_chart(hours: Sequence[datetime], zone: tzinfo) -> Chart:
    samples: defaultdict[tuple[datetime, str], list[int]] = defaultdict(list)
    answered = (
        CallRecord.objects.filter(created_at__gte=hours[0], outcome=Outcome.OK)
        .exclude(final_provider="")
        .annotate(hour=TruncHour("created_at", tzinfo=zone))
        .order_by()
        .values_list("hour", "final_provider", "latency_ms")
    )
    for hour, provider, latency_ms in answered.iterator(chunk_size=5000):
        samples[(hour, provider)].append(latency_ms)
    providers = sorted({provider for _, provider in samples})
    series = {
        provider: [charts.percentile(samples.get((hour, provider), ()), P95) for hour in hours]
        for provider in providers
    }
    title = f"p95 latency per provider per hour, last {len(hours)} hours"
    return Chart(
        slug="latency",
        title=title,
        svg=charts.line_chart(
            title=title,
            labels=[hour_label(hour) for hour in hours],
            series=series,
            unit="ms",
            label_every=3,
        ),
        columns=["Hour", *(f"{provider} p95 (ms)" for provider in providers)],
        rows=[
            [hour_row_label(hour), *(_or_dash(series[p][i]) for p in providers)]
            for i, hour in enumerate(hours)
        ],
        summary="Requests a provider answered (outcome ok), by the provider that answered.",
    )


def spend_chart(days: Sequence[date], zone: tzinfo) -> Chart:
    since = timezone.make_aware(datetime.combine(days[0], time.min), zone)
    per_day = {
        row["day"]: (row["spend"] or Decimal("0"), row["n"])
        for row in CallRecord.objects.filter(created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .order_by()
        .values("day")
        .annotate(spend=Sum("cost"), n=Count("id"))
    }
    spend = [per_day.get(day, (Decimal("0"), 0))[0] for day in days]
    requests = [per_day.get(day, (Decimal("0"), 0))[1] for day in days]
    total = sum(spend, Decimal("0"))
    title = f"Spend per day, last {len(days)} days"
    return Chart(
        slug="spend",
        title=title,
        svg=charts.bar_chart(
            title=title,
            labels=[dateformat.format(day, "j M") for day in days],
            values=[float(amount) for amount in spend],
            color="#0072b2",
            label_every=5,
            total_label=f"total {money(total)}",
            empty_note=charts.NO_REQUESTS if not any(requests) else "No spend in this period.",
        ),
        columns=["Day", "requests", "spend"],
        rows=[
            [dateformat.format(day, "D j M Y"), requests[i], money(spend[i])]
            for i, day in enumerate(days)
        ],
        footer=["Total", sum(requests), money(total)],
        summary=f"Total {money(total)} over {len(days)} days.",
    )


def money(amount: Decimal) -> str:
    """Cents once there are units to speak of; below that, the fractions cloud calls cost."""
    size = abs(amount)
    places = 2 if size >= 1 else 4 if size >= Decimal("0.01") else 6
    return f"{amount:,.{places}f}"


def _or_dash(value: float | None) -> str:
    return "—" if value is None else f"{round(value)}"
