"""The ledger's roll-ups and its retention: each complete day summed into `DailyUsage` (and what
fell inside each incident into `IncidentUsage`), then the records older than the policy's
`ledger_retention_days` deleted, only once rolled up.

How far the roll-up has gone is one row, `LedgerRollUp`: every record created before
`through_at` with an id up to `through_id` is in the roll-ups, and no other. A run moves
`through_at` to the start of the current day in the policy's time zone (once the day before has
been over for `GRACE`) and `through_id` to the newest committed record, and adds to the
roll-ups exactly the records the new bounds take in and the old ones didn't:

- the records of the days just completed;
- the records of earlier days above the old id: rows written late for a day already rolled up
  (a spill file replayed, a batch retried after an outage).

So a day is rolled up again whenever late rows arrive for it, by adding those rows rather than
by summing the day afresh: that works as well for a day whose records are already pruned, and
a second run finds nothing to add. Record ids only grow (PostgreSQL's sequence, SQLite's
AUTOINCREMENT), which is what makes "above the old id" mean "written since".

The reports (`billing.reports`) read the roll-ups plus the records `live_records` gives: those
not rolled up, whatever their day.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db import OperationalError, connections, router, transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    F,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncDate

from billing.models import CallRecord, DailyUsage, IncidentUsage, LedgerRollUp, Tier
from billing.selectors import cloud_q
from providers.models import Incident
from providers.selectors import policy_get

logger = logging.getLogger(__name__)

# A day is rolled up this long after it ends: the ledger writer's batches and the incidents'
# hand-over are seconds behind the requests, so the roll-up seldom has to add late rows.
GRACE = timedelta(minutes=15)
PRUNE_BATCH = 5000
# How long the roll-up waits for the ledger's writes in flight on PostgreSQL; inserts queue
# behind a waiting lock, so it gives up quickly and tries again at the next run.
LOCK_TIMEOUT = "2s"

DIMENSIONS = ("day", "provider", "client", "tier", "outcome", "is_cloud")
MEASURES = ("requests", "tokens_in", "tokens_out", "cost", "cache_hits", "static_answers")


def policy_zone() -> ZoneInfo:
    return ZoneInfo(policy_get().time_zone)


def day_start(day: date, zone: ZoneInfo) -> datetime:
    """Midnight at the start of `day` in `zone` (on a day whose midnight a clock change skips,
    the moment of the change)."""
    return datetime.combine(day, time.min, tzinfo=zone)


def local_day(moment: datetime, zone: ZoneInfo) -> date:
    return moment.astimezone(zone).date()


def is_cloud() -> Case:
    return Case(
        When(cloud_q(), then=Value(True)), default=Value(False), output_field=BooleanField()
    )


def ledger_sums() -> dict[str, Any]:
    """The measures summed over ledger records, named as the roll-up's columns with `total_`
    before them (an annotation may not take a column's name)."""
    return {
        "total_requests": Count("id"),
        "total_tokens_in": Sum("tokens_in"),
        "total_tokens_out": Sum("tokens_out"),
        "total_cost": Sum("cost"),
        "total_cache_hits": Count("id", filter=Q(cache_hit=True)),
        "total_static_answers": Count("id", filter=Q(tier=Tier.STATIC)),
    }


def rolled_sums() -> dict[str, Any]:
    """The same measures summed over `DailyUsage` rows."""
    return {f"total_{name}": Sum(name) for name in MEASURES}


def ledger_by_day(records: QuerySet[CallRecord], zone: ZoneInfo) -> QuerySet[CallRecord]:
    """Records with the roll-up's dimensions as annotations, ready for `.values(...)`."""
    return records.annotate(
        day=TruncDate("created_at", tzinfo=zone), provider=F("final_provider"), is_cloud=is_cloud()
    )


def roll_up_state() -> LedgerRollUp:
    """How far the roll-up has gone (before the first one: nothing, unsaved)."""
    return LedgerRollUp.objects.filter(pk=LedgerRollUp.SINGLETON_ID).first() or LedgerRollUp()


def live_records(
    start: datetime, end: datetime | None, state: LedgerRollUp
) -> QuerySet[CallRecord]:
    """The records created in [start, end) (no end: up to now) that are not rolled up. Two
    ranges, each on an index: the days after the roll-up by time, late rows by id."""
    upper = {} if end is None else {"created_at__lt": end}
    if state.through_at is None:
        return CallRecord.objects.filter(created_at__gte=start, **upper)
    after = Q(created_at__gte=max(start, state.through_at), **upper)
    late_end = state.through_at if end is None else min(end, state.through_at)
    late = Q(created_at__gte=start, created_at__lt=late_end, id__gt=state.through_id)
    return CallRecord.objects.filter(after | late)


@contextmanager
def consistent_read() -> Iterator[None]:
    """One snapshot for the roll-ups, the state and the live records read together, so a
    roll-up committed in between counts nothing twice. PostgreSQL's default isolation takes a
    snapshot per statement, so the transaction asks for one (only where it is the outermost:
    the level can't change once a transaction has run a query)."""
    db = connections[router.db_for_read(CallRecord)]
    outermost = not db.in_atomic_block
    with transaction.atomic(using=db.alias):
        if outermost and db.vendor == "postgresql":
            with db.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def _committed_high_water() -> int | None:
    """The newest record id with every record up to it committed; None when the ledger's
    writes in flight didn't finish in time. On PostgreSQL a batch being written holds ids that
    others can't see yet while a later batch may have committed: the SHARE lock waits for the
    writes in flight and is held for one max() on the primary key. SQLite has one writer at a
    time, so every id it shows is committed."""
    db = connections[router.db_for_write(CallRecord)]
    try:
        with transaction.atomic(using=db.alias):
            if db.vendor == "postgresql":
                with db.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    table = db.ops.quote_name(CallRecord._meta.db_table)
                    cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")
            return CallRecord.objects.using(db.alias).aggregate(high=Max("id"))["high"] or 0
    except OperationalError:
        logger.warning("ledger roll-up postponed: the ledger's writes took over %s", LOCK_TIMEOUT)
        return None


def _newly_rolled(state: LedgerRollUp, through_at: datetime, through_id: int) -> Q:
    """The records the bounds (through_at, through_id) take in and the state's don't."""
    whole = Q(created_at__lt=through_at, id__lte=through_id)
    if state.through_at is None:
        return whole
    completed = Q(created_at__gte=state.through_at, created_at__lt=through_at)
    late = Q(created_at__lt=state.through_at, id__gt=state.through_id)
    return whole & (completed | late)


def ledger_roll_up(*, now: datetime) -> int:
    """Roll up every complete day not rolled up yet, and the rows written late for days that
    were; returns how many records were added. Call it outside a transaction."""
    zone = policy_zone()
    through_at = day_start(local_day(now - GRACE, zone), zone)
    high = _committed_high_water()
    if high is None:
        return 0
    LedgerRollUp.objects.get_or_create(pk=LedgerRollUp.SINGLETON_ID)
    with transaction.atomic():
        # One roll-up at a time: a second one waits here, then finds the first one's bounds.
        current = LedgerRollUp.objects.select_for_update().get(pk=LedgerRollUp.SINGLETON_ID)
        if current.through_at is not None:
            # A time zone moved west would put the day's start before what is rolled up.
            through_at = max(through_at, current.through_at)
        high = max(high, current.through_id)
        if (current.through_at, current.through_id) == (through_at, high):
            return 0
        records = CallRecord.objects.filter(_newly_rolled(current, through_at, high))
        added = _add_days(records, zone)
        if added:
            _add_incidents(records)
        current.through_at, current.through_id = through_at, high
        current.save()
    return added


def _add_days(records: QuerySet[CallRecord], zone: ZoneInfo) -> int:
    sums = list(
        ledger_by_day(records, zone).order_by().values(*DIMENSIONS).annotate(**ledger_sums())
    )
    if not sums:
        return 0
    existing = {
        tuple(getattr(row, name) for name in DIMENSIONS): row
        for row in DailyUsage.objects.select_for_update().filter(
            day__in={row["day"] for row in sums}
        )
    }
    created: list[DailyUsage] = []
    changed: list[DailyUsage] = []
    for row in sums:
        key = tuple(row[name] for name in DIMENSIONS)
        usage = existing.get(key)
        if usage is None:
            usage = DailyUsage(**dict(zip(DIMENSIONS, key, strict=True)))
            created.append(usage)
        else:
            changed.append(usage)
        for name in MEASURES:
            setattr(usage, name, getattr(usage, name) + (row[f"total_{name}"] or 0))
    DailyUsage.objects.bulk_update(changed, MEASURES)
    DailyUsage.objects.bulk_create(created)
    return sum(row["total_requests"] for row in sums)


def _add_incidents(records: QuerySet[CallRecord]) -> None:
    """Each incident's share of the records: one query per incident overlapping them
    (incidents are few; a row can fall in several, when providers are out together)."""
    span = records.aggregate(first=Min("created_at"), last=Max("created_at"))
    incidents = Incident.objects.filter(started_at__lte=span["last"]).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=span["first"])
    )
    for incident in incidents:
        for row in incident_sums(records, incident):
            usage, _ = IncidentUsage.objects.select_for_update().get_or_create(
                incident=incident, tier=row["tier"]
            )
            usage.requests += row["requests"]
            usage.cloud_cost += row["cloud_cost"] or Decimal("0")
            usage.save(update_fields=["requests", "cloud_cost"])


def incident_sums(records: QuerySet[CallRecord], incident: Incident) -> list[dict[str, Any]]:
    """Of `records`, those created while `incident` lasted: requests and cloud cost per tier."""
    during = records.filter(created_at__gte=incident.started_at)
    if incident.ended_at is not None:
        during = during.filter(created_at__lt=incident.ended_at)
    sums = (
        during.order_by()
        .values("tier")
        .annotate(requests=Count("id"), cloud_cost=Sum("cost", filter=cloud_q()))
    )
    return [dict(row) for row in sums]


def ledger_prune(*, now: datetime, batch_size: int = PRUNE_BATCH) -> int:
    """Delete the records of the days before the retention (`ledger_retention_days` whole days
    kept before today, in the policy's time zone) that are rolled up; returns how many. One
    short transaction per batch, walking up the ids, so inserts never wait long."""
    policy = policy_get()
    zone = ZoneInfo(policy.time_zone)
    state = roll_up_state()
    if state.through_at is None:
        return 0
    keep_from = day_start(local_day(now, zone) - timedelta(days=policy.ledger_retention_days), zone)
    rolled_and_old = CallRecord.objects.filter(
        created_at__lt=min(keep_from, state.through_at), id__lte=state.through_id
    )
    deleted, after = 0, 0
    while True:
        ids = list(
            rolled_and_old.filter(id__gt=after)
            .order_by("id")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            count, _ = CallRecord.objects.filter(id__in=ids).delete()
        deleted += count
        after = ids[-1]


def ledger_housekeeping(*, now: datetime) -> dict[str, int]:
    """The roll-up, then the pruning it allows: what the background jobs run."""
    rolled_up = ledger_roll_up(now=now)
    pruned = ledger_prune(now=now)
    if rolled_up or pruned:
        logger.info("ledger: %d records rolled up, %d pruned", rolled_up, pruned)
    return {"rolled_up": rolled_up, "pruned": pruned}
