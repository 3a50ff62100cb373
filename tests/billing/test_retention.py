"""The ledger's roll-ups and retention: complete days summed, late rows added, only rolled-up
rows past the retention deleted, and the reports' figures the same either side of a prune."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest
from django.db import connection

from billing.ledger import write_records
from billing.models import CallRecord, DailyUsage, IncidentUsage, LedgerRollUp
from billing.report_options import REPORTS, report_query
from billing.reports import report_build
from billing.retention import ledger_housekeeping, ledger_prune, ledger_roll_up
from providers.models import Incident
from tests.factories import make_call_record, make_provider, make_static_answer, policy_set

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
TODAY = NOW.date()
LOCAL, CLOUD = "ollama-local", "openai-cloud"


@pytest.fixture(autouse=True)
def providers():
    make_provider(name=LOCAL, is_local=True)
    make_provider(name=CLOUD, is_local=False)


def record(when, provider=LOCAL, *, tier=None, outcome="ok", cost="0", client="web", **extra):
    tier = tier or ("primary" if provider == LOCAL else "secondary")
    return make_call_record(
        created_at=when,
        final_provider=provider if tier in ("primary", "secondary") else "",
        tier=tier,
        outcome=outcome if tier in ("primary", "secondary") else "fallback",
        cost=Decimal(cost),
        client=client,
        tokens_in=extra.pop("tokens_in", 10),
        tokens_out=extra.pop("tokens_out", 20),
        **extra,
    )


def late_row(when, provider=CLOUD, cost="0.5"):
    """A row as a replayed spill file brings it: written now, for a time long past."""
    return {
        "request_id": str(uuid.uuid4()),
        "created_at": when,
        "client": "web",
        "tier": "secondary",
        "outcome": "ok",
        "status": 200,
        "final_provider": provider,
        "cost": Decimal(cost),
        "tokens_in": 1,
        "tokens_out": 1,
        "attempts": [{"provider": provider, "outcome": "ok", "latency_ms": 5}],
    }


def usage_rows():
    return sorted(
        (u.day, u.provider, u.client, u.tier, u.outcome, u.is_cloud, u.requests, u.cost)
        for u in DailyUsage.objects.all()
    )


def all_reports(since, until=TODAY, by="day"):
    figures = {}
    for name in REPORTS:
        query = report_query(
            report=name,
            now=NOW,
            since=str(since),
            until=str(until),
            by=by if name != "incidents" else None,
        )
        report = report_build(query)
        figures[name] = (report.rows, report.summary)
    return figures


class TestRollUp:
    def test_it_rolls_up_complete_days_only(self):
        record(NOW - timedelta(days=1))
        record(NOW - timedelta(days=1), CLOUD, cost="0.5")
        record(NOW)  # today: still live
        assert ledger_roll_up(now=NOW) == 2
        assert usage_rows() == [
            (date(2026, 11, 19), LOCAL, "web", "primary", "ok", False, 1, Decimal("0")),
            (date(2026, 11, 19), CLOUD, "web", "secondary", "ok", True, 1, Decimal("0.5")),
        ]
        state = LedgerRollUp.objects.get()
        assert state.through_at == datetime(2026, 11, 20, tzinfo=UTC)

    def test_it_sums_every_measure(self):
        answer = make_static_answer()
        day = NOW - timedelta(days=1)
        record(day, tokens_in=7, tokens_out=9)
        record(day, tokens_in=3, tokens_out=1)
        record(day, tier="cache", cache_hit=True)
        record(day, tier="static", static_answer=answer)
        ledger_roll_up(now=NOW)
        local = DailyUsage.objects.get(provider=LOCAL)
        assert (local.requests, local.tokens_in, local.tokens_out) == (2, 10, 10)
        cache = DailyUsage.objects.get(tier="cache")
        assert (cache.provider, cache.is_cloud, cache.cache_hits) == ("", False, 1)
        assert DailyUsage.objects.get(tier="static").static_answers == 1

    def test_running_it_twice_adds_nothing(self):
        for days in (1, 2, 5):
            record(NOW - timedelta(days=days), CLOUD, cost="0.25")
        assert ledger_roll_up(now=NOW) == 3
        rolled = usage_rows()
        assert ledger_roll_up(now=NOW) == 0
        assert ledger_roll_up(now=NOW + timedelta(hours=3)) == 0
        assert usage_rows() == rolled

    def test_a_day_is_rolled_up_once_its_grace_after_midnight_is_over(self):
        record(datetime(2026, 11, 19, 23, 59, tzinfo=UTC))
        assert ledger_roll_up(now=datetime(2026, 11, 20, 0, 5, tzinfo=UTC)) == 0
        assert ledger_roll_up(now=datetime(2026, 11, 20, 0, 20, tzinfo=UTC)) == 1

    def test_days_begin_at_midnight_in_the_policys_time_zone(self):
        policy_set(time_zone="America/New_York")  # UTC-5 in November
        record(datetime(2026, 11, 18, 4, 30, tzinfo=UTC))  # 17 Nov 23:30 there
        record(datetime(2026, 11, 18, 5, 30, tzinfo=UTC))  # 18 Nov 00:30
        record(datetime(2026, 11, 19, 4, 59, tzinfo=UTC))  # 18 Nov 23:59
        record(datetime(2026, 11, 19, 5, 0, tzinfo=UTC))  # 19 Nov 00:00: not complete yet
        before = all_reports(date(2026, 11, 17), date(2026, 11, 19))
        assert ledger_roll_up(now=datetime(2026, 11, 19, 6, 0, tzinfo=UTC)) == 3
        days = {u.day: u.requests for u in DailyUsage.objects.all()}
        assert days == {date(2026, 11, 17): 1, date(2026, 11, 18): 2}
        assert all_reports(date(2026, 11, 17), date(2026, 11, 19)) == before
        spend = before["spend"][0]
        assert [(r["period"], r["requests"]) for r in spend] == [
            ("2026-11-17", 1),
            ("2026-11-18", 2),
            ("2026-11-19", 1),
        ]

    def test_a_day_a_clock_change_makes_25_hours_long_is_one_day(self):
        policy_set(time_zone="Europe/Paris")  # summer time ended on 25 October 2026
        record(datetime(2026, 10, 24, 22, 30, tzinfo=UTC))  # 25 Oct 00:30 CEST
        record(datetime(2026, 10, 25, 22, 30, tzinfo=UTC))  # 25 Oct 23:30 CET
        record(datetime(2026, 10, 25, 23, 30, tzinfo=UTC))  # 26 Oct 00:30 CET
        ledger_roll_up(now=NOW)
        days = {u.day: u.requests for u in DailyUsage.objects.all()}
        assert days == {date(2026, 10, 25): 2, date(2026, 10, 26): 1}

    def test_the_requests_in_an_incident_are_rolled_up_with_it(self):
        incident = Incident.objects.create(
            provider=LOCAL, started_at=NOW - timedelta(days=3), ended_at=NOW - timedelta(days=2)
        )
        record(NOW - timedelta(days=3, minutes=1))  # just before
        record(NOW - timedelta(days=2, hours=12), CLOUD, cost="0.30")
        record(NOW - timedelta(days=2, hours=11), tier="static")
        ledger_roll_up(now=NOW)
        rolled = {u.tier: (u.requests, u.cloud_cost) for u in IncidentUsage.objects.all()}
        assert rolled == {"secondary": (1, Decimal("0.3")), "static": (1, Decimal("0"))}
        assert {u.incident_id for u in IncidentUsage.objects.all()} == {incident.pk}


class TestPrune:
    def test_only_rolled_up_rows_past_the_retention_are_deleted(self):
        old = record(NOW - timedelta(days=40))
        kept = record(NOW - timedelta(days=10))
        assert ledger_prune(now=NOW) == 0  # nothing rolled up: nothing goes
        assert ledger_roll_up(now=NOW) == 2
        assert ledger_prune(now=NOW) == 1
        assert list(CallRecord.objects.values_list("pk", flat=True)) == [kept.pk]
        assert not CallRecord.objects.filter(pk=old.pk).exists()

    def test_the_retention_keeps_its_whole_days_before_today(self):
        policy_set(ledger_retention_days=7)
        record(datetime(2026, 11, 12, 23, 59, tzinfo=UTC))
        kept = record(datetime(2026, 11, 13, 0, 0, tzinfo=UTC))
        assert ledger_housekeeping(now=NOW) == {"rolled_up": 2, "pruned": 1}
        assert list(CallRecord.objects.values_list("pk", flat=True)) == [kept.pk]

    def test_it_deletes_in_batches(self):
        for minutes in range(5):
            record(NOW - timedelta(days=40, minutes=minutes))
        ledger_roll_up(now=NOW)
        assert ledger_prune(now=NOW, batch_size=2) == 5
        assert not CallRecord.objects.exists()

    def test_the_reports_say_the_same_before_and_after_pruning(self):
        answer = make_static_answer()
        Incident.objects.create(
            provider=LOCAL,
            started_at=NOW - timedelta(days=60, hours=1),
            ended_at=NOW - timedelta(days=60),
            reason="timeout",
        )
        for days in (85, 60, 45, 31, 29, 3, 0):
            moment = NOW - timedelta(days=days, minutes=30)
            record(moment, tokens_in=days, client="web")
            record(moment, CLOUD, cost="0.125", client="app")
            record(moment, tier="static", static_answer=answer)
            record(moment, tier="degraded", client="app")
            record(moment, CLOUD, outcome="failed", cost="0.01")
        since = NOW.date() - timedelta(days=89)
        before = {by: all_reports(since, by=by) for by in ("day", "month")}
        done = ledger_housekeeping(now=NOW)
        assert done == {"rolled_up": 30, "pruned": 20}
        assert CallRecord.objects.count() == 15
        assert {by: all_reports(since, by=by) for by in ("day", "month")} == before
        incident = before["day"]["incidents"][0][0]
        assert (incident["requests_secondary"], incident["cloud_cost"]) == (2, Decimal("0.135"))


class TestLateRows:
    def test_late_rows_are_added_to_their_day_even_once_it_is_pruned(self):
        long_ago = NOW - timedelta(days=40)
        record(long_ago, CLOUD, cost="1")
        record(NOW - timedelta(days=10), CLOUD, cost="1")
        assert ledger_housekeeping(now=NOW) == {"rolled_up": 2, "pruned": 1}

        # A spill file replayed (twice: the second one finds its rows there already).
        late = [late_row(long_ago + timedelta(hours=1)), late_row(NOW - timedelta(days=10))]
        write_records([dict(row) for row in late])
        write_records([dict(row) for row in late])
        since = NOW.date() - timedelta(days=60)
        live = all_reports(since)
        assert live["spend"][1]["cost"] == Decimal("3")  # read live until rolled up
        assert ledger_housekeeping(now=NOW) == {"rolled_up": 2, "pruned": 1}
        assert ledger_housekeeping(now=NOW) == {"rolled_up": 0, "pruned": 0}
        assert all_reports(since) == live
        by_day = {u.day: (u.requests, u.cost) for u in DailyUsage.objects.all()}
        assert by_day == {
            long_ago.date(): (2, Decimal("1.5")),
            (NOW - timedelta(days=10)).date(): (2, Decimal("1.5")),
        }

    def test_a_late_row_inside_a_pruned_incident_counts_for_it(self):
        started = NOW - timedelta(days=40, hours=2)
        Incident.objects.create(
            provider=LOCAL, started_at=started, ended_at=started + timedelta(hours=1)
        )
        record(started + timedelta(minutes=10), CLOUD, cost="0.2")
        ledger_housekeeping(now=NOW)
        assert not CallRecord.objects.exists()
        write_records([late_row(started + timedelta(minutes=20), cost="0.3")])
        since = NOW.date() - timedelta(days=45)
        live = all_reports(since)["incidents"][0][0]
        assert (live["requests_secondary"], live["cloud_cost"]) == (2, Decimal("0.5"))
        ledger_housekeeping(now=NOW)
        assert all_reports(since)["incidents"][0][0] == live
        assert IncidentUsage.objects.get().requests == 2


@pytest.mark.django_db(transaction=True)
def test_a_report_read_outside_a_transaction_takes_one_snapshot():
    """The reports' reads start their own transaction (REPEATABLE READ on PostgreSQL) when no
    transaction is open, as in a page's request."""
    record(NOW - timedelta(days=1), CLOUD, cost="0.5")
    ledger_roll_up(now=NOW)
    record(NOW, CLOUD, cost="0.25")
    assert all_reports(TODAY - timedelta(days=2))["spend"][1]["cost"] == Decimal("0.75")


@pytest.mark.services
def test_on_postgresql_the_roll_up_waits_for_the_ledgers_writes_in_flight(caplog):
    """A batch being written holds ids others can't see yet: the roll-up doesn't move past
    them. It waits a moment for the write to finish, and tries again next time if it doesn't."""
    record(NOW - timedelta(days=1))
    database = connection.settings_dict
    with psycopg.connect(
        host=database["HOST"] or None,
        port=database["PORT"] or None,
        user=database["USER"] or None,
        password=database["PASSWORD"] or None,
        dbname=database["NAME"],
    ) as writer:
        # What an INSERT of the ledger writer holds until its transaction commits.
        writer.execute("LOCK TABLE billing_callrecord IN ROW EXCLUSIVE MODE")
        assert ledger_roll_up(now=NOW) == 0
        assert "ledger roll-up postponed" in caplog.text
        assert not DailyUsage.objects.exists()
    assert ledger_roll_up(now=NOW) == 1
