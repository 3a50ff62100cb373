"""The reports page: spend, cloud share, static coverage and incidents over a range of days, each
with its target, a chart drawn on the server (charts.py) and its numbers as a table, and a
"Download CSV" link that serves what `manage.py report … --format csv` prints.

The figures, the options' checks and the CSV are `billing.reports`, `billing.report_options`
and `billing.report_formats`: this module only lays them out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import dateformat, timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from billing.report_formats import cell, report_csv
from billing.report_options import REPORTS, Report, ReportError, ReportQuery, report_query
from billing.reports import money_words, report_build
from control_room import charts
from control_room.charts_views import TIER_COLORS
from providers.form_input import FormInput, bad_request

PERMISSION = "billing.view_callrecord"
TARGET_COLOR = "#757575"
FALLBACK_LABEL = "fallback tiers"
OPTIONS = ("since", "until", "by", "group")


def urls(site: AdminSite) -> list[URLPattern]:
    @require_GET
    def reports_page(request: HttpRequest) -> TemplateResponse:
        return reports_view(request, site=site)

    @require_GET
    def report_download(request: HttpRequest, report: str) -> HttpResponse:
        return report_csv_view(request, report=report)

    return [
        path("control/reports/", site.admin_view(reports_page), name="control-reports"),
        path(
            "control/reports/<slug:report>.csv",
            site.admin_view(report_download),
            name="control-reports-csv",
        ),
    ]


@dataclass(frozen=True)
class Section:
    """One report as the page shows it."""

    report: Report
    charts: Sequence[SafeString]
    csv_url: str
    table: Sequence[Sequence[str]]

    @property
    def slug(self) -> str:
        return self.report.query.report


def _check(request: HttpRequest) -> None:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied("The reports read the call ledger: they take its view permission.")


def _read_options(given: FormInput) -> dict[str, str | None]:
    """The page's options, one value each, without NUL, short: any other is in `given.errors`
    and read as not given."""
    return {name: given.text(name, max_length=40) or None for name in OPTIONS}


def _options(read: dict[str, str | None], report: str) -> dict[str, str | None]:
    """The page's options as the report takes them: its periods and grouping only where it has
    them (the page groups only the spend)."""
    options = dict(read)
    if report == "incidents":
        options["by"] = None
    if report != "spend":
        options["group"] = None
    return options


def report_csv_view(request: HttpRequest, *, report: str) -> HttpResponse:
    _check(request)
    given = FormInput(request.GET)
    options = _options(_read_options(given), report)
    if given.errors:
        return bad_request(given.errors)
    try:
        query = report_query(report=report, now=timezone.now(), **options)
    except ReportError as error:
        return HttpResponse(f"{error.option}: {error}", status=400, content_type="text/plain")
    response = HttpResponse(report_csv(report_build(query)), content_type="text/csv; charset=utf-8")
    name = f"{report}-{query.since}-{query.until}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def reports_view(request: HttpRequest, *, site: AdminSite) -> TemplateResponse:
    _check(request)
    now = timezone.now()
    given = FormInput(request.GET)
    read = _read_options(given)
    # A refused option is read as not given, and said above the reports.
    errors = [f"{name}: {text}" for name, texts in given.errors.items() for text in texts]
    queries = []
    for report in REPORTS:
        try:
            queries.append(report_query(report=report, now=now, **_options(read, report)))
        except ReportError as error:
            errors.append(f"{error.option}: {error}")
            queries.append(report_query(report=report, now=now))
    spend = queries[0]
    context = {
        **site.each_context(request),
        "title": "Reports",
        "errors": sorted(set(errors)),
        "form": {"since": spend.since, "until": spend.until, "by": spend.by, "group": spend.group},
        "time_zone": spend.policy.time_zone,
        "currency": spend.policy.currency,
        "sections": [_section(report_build(query)) for query in queries],
    }
    return TemplateResponse(request, "control/reports.html", context)


def _section(report: Report) -> Section:
    query = report.query
    params: dict[str, object] = {"since": query.since, "until": query.until}
    if query.report != "incidents":
        params["by"] = query.by
    if query.report == "spend":
        params["group"] = query.group
    url = reverse("admin:control-reports-csv", args=[query.report]) + "?" + urlencode(params)
    drawn = {
        "spend": _spend_charts,
        "cloud-share": _share_charts,
        "coverage": _share_charts,
        "incidents": _incident_charts,
    }[query.report](report)
    table = [[cell(row[column]) for column in report.columns] for row in report.rows]
    return Section(report=report, charts=drawn, csv_url=url, table=table)


def _periods(query: ReportQuery) -> tuple[list[date], list[str], int]:
    buckets = query.buckets()
    fmt = "j M" if query.by == "day" else "M Y"
    labels = [dateformat.format(bucket, fmt) for bucket in buckets]
    return buckets, labels, max(1, len(labels) // 8)


def _spend_charts(report: Report) -> list[SafeString]:
    query = report.query
    buckets, labels, every = _periods(query)
    index = {query.label(bucket): i for i, bucket in enumerate(buckets)}
    cost = [0.0] * len(buckets)
    requests: defaultdict[str, list[float]] = defaultdict(lambda: [0.0] * len(buckets))
    for row in report.rows:
        i = index[row["period"]]
        cost[i] += float(row["cost"])
        requests[row[query.group] or FALLBACK_LABEL][i] += row["requests"]
    total = report.summary["cost"]
    return [
        charts.bar_chart(
            title=f"Spend per {query.by} ({query.policy.currency})",
            labels=labels,
            values=cost,
            unit=query.policy.currency,
            label_every=every,
            total_label=f"total {money_words(total)} {query.policy.currency}",
            empty_note="No spend in this period." if requests else charts.NO_REQUESTS,
        ),
        charts.stacked_bar_chart(
            title=f"Requests per {query.group} per {query.by}",
            labels=labels,
            series=dict(sorted(requests.items())),
            unit="requests",
            label_every=every,
        ),
    ]


def _share_charts(report: Report) -> list[SafeString]:
    """The share per period as a line, with the target as a flat grey line to read it against."""
    query = report.query
    buckets, labels, every = _periods(query)
    key = "cloud_share_pct" if query.report == "cloud-share" else "coverage_pct"
    by_period = {row["period"]: row[key] for row in report.rows}
    target = report.summary["target_pct"]
    name = "cloud share of requests" if query.report == "cloud-share" else "static coverage"
    target_name = f"target {target:g} %"
    series: dict[str, list[float | None]] = {
        f"{name} (%)": [by_period.get(query.label(bucket)) for bucket in buckets],
        target_name: [float(target)] * len(buckets),
    }
    return [
        charts.line_chart(
            title=f"{name.capitalize()} per {query.by}, against its target",
            labels=labels,
            series=series,
            colors={target_name: TARGET_COLOR},
            unit="%",
            label_every=every,
        )
    ]


def _incident_charts(report: Report) -> list[SafeString]:
    zone = report.query.zone
    labels = [
        f"{row['provider']} {dateformat.format(_started(row, zone), 'j M H:i')}"
        for row in report.rows
    ]
    tiers = list(TIER_COLORS)
    series = {tier: [float(row[f"requests_{tier}"]) for row in report.rows] for tier in tiers}
    return [
        charts.stacked_bar_chart(
            title="Requests per tier during each incident",
            labels=labels,
            series=series,
            colors=TIER_COLORS,
            unit="requests",
            label_every=max(1, len(labels) // 6),
            empty_note="No incidents in this period.",
        )
    ]


def _started(row: dict[str, Any], zone: tzinfo) -> datetime:
    return datetime.fromisoformat(row["started_at"]).astimezone(zone)
