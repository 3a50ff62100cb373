"""A report's options: which report, the range of days in the policy's time zone, by day or
month, grouped by what; checked once here for the command and the control room alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from billing.retention import day_start, local_day
from providers.models import FailoverPolicy
from providers.selectors import policy_get

REPORTS = ("spend", "cloud-share", "coverage", "incidents")
PERIODS = ("day", "month")
# What each report may be grouped by; the first is its default ("" for none).
GROUPS: dict[str, tuple[str, ...]] = {
    "spend": ("provider", "client"),
    "cloud-share": ("", "client"),
    "coverage": ("", "client"),
    "incidents": ("",),
}
DEFAULT_DAYS = 30
MAX_DAYS = 731

DEFINITIONS = {
    "spend": "Every request, by the provider that answered (blank: a fallback tier) or by the "
    "client app: requests, prompt and answer tokens, and cost at the providers' prices.",
    "cloud-share": "Of the requests a provider answered (tier primary or secondary, outcome "
    "ok), the share answered by a cloud provider (one not self-hosted), in requests and in "
    "tokens. On target at or under the policy's cloud share target.",
    "coverage": "Of the requests that reached the static tier (no provider and no cached "
    "answer could answer, or the kill switch sent them there), the share given a matching "
    "static answer rather than the degradation message. On target at or above the policy's "
    "static coverage target.",
    "incidents": "Each provider outage (breaker open to closed) that overlaps the range: its "
    "length, the requests each tier served while it lasted (all clients), and the cloud "
    "providers' cost in that time.",
}


class ReportError(ValueError):
    """A bad option, said for the option it is about (`since`, `by` …)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class ReportQuery:
    report: str
    since: date
    until: date  # included
    by: str
    group: str
    policy: FailoverPolicy
    now: datetime

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.policy.time_zone)

    @property
    def start(self) -> datetime:
        return day_start(self.since, self.zone)

    @property
    def end(self) -> datetime:
        return day_start(self.until + timedelta(days=1), self.zone)

    def bucket(self, day: date) -> date:
        return day if self.by == "day" else day.replace(day=1)

    def buckets(self) -> list[date]:
        """Every period of the range, oldest first (a month cut by the range counts its part)."""
        days = (self.since + timedelta(days=n) for n in range((self.until - self.since).days + 1))
        return sorted({self.bucket(day) for day in days})

    def label(self, bucket: date) -> str:
        return bucket.isoformat() if self.by == "day" else f"{bucket:%Y-%m}"


# The days a report may name: the ledger's, with room; past them a range's arithmetic overflows.
FIRST_DAY, LAST_DAY = date(2000, 1, 1), date(9998, 12, 31)


def _date(option: str, value: str | None) -> date | None:
    if value in (None, ""):
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise ReportError(option, f"{value!r} is not a date as YYYY-MM-DD.") from None
    if not FIRST_DAY <= day <= LAST_DAY:  # a range's end is the next day's midnight
        raise ReportError(option, f"{value} is outside {FIRST_DAY} to {LAST_DAY}.")
    return day


def report_query(
    *,
    report: str,
    now: datetime,
    since: str | None = None,
    until: str | None = None,
    by: str | None = None,
    group: str | None = None,
) -> ReportQuery:
    """The options as given (text, or None for the default), checked: the last 30 days up to
    today in the policy's time zone unless said, by day, grouped as the report's default."""
    if report not in REPORTS:
        raise ReportError("report", f"no report {report!r}: choose from {', '.join(REPORTS)}.")
    policy = policy_get()
    today = local_day(now, ZoneInfo(policy.time_zone))
    last = _date("until", until) or today
    first = _date("since", since) or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise ReportError("since", f"the range starts ({first}) after it ends ({last}).")
    if (last - first).days >= MAX_DAYS:
        raise ReportError("since", f"a report covers at most {MAX_DAYS} days.")
    by = by or "day"
    if by not in PERIODS:
        raise ReportError("by", f"group by day or month, not {by!r}.")
    if report == "incidents" and by != "day":
        raise ReportError("by", "the incidents report lists incidents: it has no periods.")
    allowed = GROUPS[report]
    group = allowed[0] if group is None else group
    if group not in allowed:
        choices = " or ".join(repr(g) for g in allowed if g) or "nothing"
        raise ReportError("group", f"the {report} report is grouped by {choices}, not {group!r}.")
    return ReportQuery(report, first, last, by, group, policy, now)


@dataclass(frozen=True)
class Report:
    query: ReportQuery
    title: str
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    headline: str
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> str:
        return DEFINITIONS[self.query.report]
