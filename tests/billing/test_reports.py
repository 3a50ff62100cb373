"""The reports, from real ledger rows: spend, cloud share, static coverage and incidents, and
`manage.py report` in CSV, JSON and text."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from billing.report_formats import report_csv
from billing.report_options import report_query
from billing.reports import report_build
from providers.models import Incident
from tests.factories import make_call_record, make_provider, policy_set

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
LOCAL, CLOUD = "ollama-local", "openai-cloud"


@pytest.fixture(autouse=True)
def providers():
    make_provider(name=LOCAL, is_local=True)
    make_provider(name=CLOUD, is_local=False)


def at(day: int, hour: int = 12, minute: int = 0) -> datetime:
    """November 2026, in UTC."""
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def answered(provider=LOCAL, *, when, cost="0", tokens=(10, 20), client="web", **extra):
    tier = "primary" if provider == LOCAL else "secondary"
    return make_call_record(
        final_provider=provider,
        tier=tier,
        outcome="ok",
        created_at=when,
        cost=Decimal(cost),
        tokens_in=tokens[0],
        tokens_out=tokens[1],
        client=client,
        **extra,
    )


def fallback(tier, *, when, client="web"):
    return make_call_record(
        final_provider="",
        tier=tier,
        outcome="fallback",
        created_at=when,
        client=client,
        tokens_in=0,
        tokens_out=0,
        cache_hit=tier == "cache",
    )


def build(report, **options):
    return report_build(report_query(report=report, now=NOW, **options))


def run(report, *args):
    out = io.StringIO()
    call_command("report", report, *args, stdout=out)
    return out.getvalue()


class TestSpend:
    def test_it_is_summed_per_provider_per_day(self):
        answered(when=at(18, 9), tokens=(10, 20))
        answered(when=at(18, 10), tokens=(5, 5))
        answered(CLOUD, when=at(18, 11), cost="0.5", tokens=(100, 200))
        answered(CLOUD, when=at(19), cost="0.25", tokens=(1, 2))
        fallback("static", when=at(19))

        report = build("spend", since="2026-11-18", until="2026-11-20")
        rows = [(r["period"], r["provider"], r["requests"], r["cost"]) for r in report.rows]
        assert rows == [
            ("2026-11-18", LOCAL, 2, Decimal("0")),
            ("2026-11-18", CLOUD, 1, Decimal("0.5")),
            ("2026-11-19", "", 1, Decimal("0")),
            ("2026-11-19", CLOUD, 1, Decimal("0.25")),
        ]
        local_row = report.rows[0]
        assert (local_row["tokens_in"], local_row["tokens_out"]) == (15, 25)
        assert local_row["currency"] == "EUR"
        assert report.summary == {"requests": 5, "tokens": 343, "cost": Decimal("0.75")}

    def test_it_is_summed_per_client_per_month_in_the_policys_currency(self):
        policy_set(currency="USD")
        answered(CLOUD, when=datetime(2026, 10, 31, 12, tzinfo=UTC), cost="1", client="web")
        answered(CLOUD, when=at(1), cost="2", client="web")
        answered(CLOUD, when=at(2), cost="0.125", client="app")
        answered(when=at(3), client="app")

        report = build("spend", since="2026-10-01", until="2026-11-20", by="month", group="client")
        rows = [(r["period"], r["client"], r["requests"], r["cost"]) for r in report.rows]
        assert rows == [
            ("2026-10", "web", 1, Decimal("1")),
            ("2026-11", "app", 2, Decimal("0.125")),
            ("2026-11", "web", 1, Decimal("2")),
        ]
        assert {row["currency"] for row in report.rows} == {"USD"}
        assert "3.13 USD" in report.headline  # rounded half up, as an invoice is

    def test_only_the_range_counts(self):
        answered(CLOUD, when=at(9), cost="9")
        answered(CLOUD, when=at(10), cost="1")
        report = build("spend", since="2026-11-10", until="2026-11-10")
        assert [r["cost"] for r in report.rows] == [Decimal("1")]

    def test_the_default_range_is_the_last_30_days_up_to_today(self):
        answered(CLOUD, when=NOW - timedelta(days=30), cost="4")
        answered(CLOUD, when=NOW - timedelta(days=29), cost="2")
        answered(CLOUD, when=NOW, cost="1")
        query = report_query(report="spend", now=NOW)
        assert (str(query.since), str(query.until)) == ("2026-10-22", "2026-11-20")
        assert report_build(query).summary["cost"] == Decimal("3")


class TestCloudShare:
    def test_only_requests_a_provider_answered_count(self):
        for _ in range(3):
            answered(when=at(19), tokens=(10, 10))
        answered(CLOUD, when=at(19), tokens=(30, 30))
        # Not answered by a provider: none of these is in either side of the share.
        make_call_record(
            final_provider=CLOUD, tier="secondary", outcome="failed", created_at=at(19)
        )
        make_call_record(final_provider=CLOUD, tier="none", outcome="rejected", status=400,
                         created_at=at(19))  # fmt: skip
        fallback("static", when=at(19))
        fallback("cache", when=at(19))

        report = build("cloud-share", since="2026-11-19", until="2026-11-19")
        (row,) = report.rows
        assert (row["answered"], row["cloud_requests"], row["cloud_share_pct"]) == (4, 1, 25.0)
        assert (row["answered_tokens"], row["cloud_tokens"]) == (120, 60)
        assert row["cloud_token_share_pct"] == 50.0
        assert (row["target_pct"], row["verdict"]) == (5, "above target")
        assert "above target" in report.headline and "at most 5 %" in report.headline

    def test_under_the_target_is_on_target_and_a_deleted_provider_counts_as_cloud(self):
        policy_set(cloud_share_target_pct=10)
        for _ in range(9):
            answered(when=at(19))
        answered("gone-provider", when=at(19))
        (row,) = build("cloud-share", since="2026-11-19", until="2026-11-19").rows
        assert (row["cloud_share_pct"], row["verdict"]) == (10.0, "on target")

    def test_it_is_per_period_and_per_client_when_asked(self):
        answered(when=at(18), client="web")
        answered(CLOUD, when=at(19), client="web")
        answered(when=at(19), client="app")
        by_client = build("cloud-share", since="2026-11-18", until="2026-11-19", group="client")
        shares = [(r["period"], r["client"], r["cloud_share_pct"]) for r in by_client.rows]
        assert shares == [
            ("2026-11-18", "web", 0.0),
            ("2026-11-19", "app", 0.0),
            ("2026-11-19", "web", 100.0),
        ]
        assert by_client.summary["cloud_share_pct"] == pytest.approx(33.33)

    def test_no_answered_requests_has_no_share(self):
        fallback("degraded", when=at(19))
        report = build("cloud-share", since="2026-11-19", until="2026-11-19")
        assert report.rows == []
        assert report.summary["cloud_share_pct"] is None
        assert report.summary["verdict"] == "no requests"
        assert (
            report.headline
            == "No request answered by a provider (target at most 5 %): no requests."
        )


class TestCoverage:
    def test_it_is_the_static_answers_share_of_what_reached_the_static_tier(self):
        for _ in range(3):
            fallback("static", when=at(19))
        fallback("degraded", when=at(19))
        fallback("cache", when=at(19))  # answered before the static tier
        answered(when=at(19))
        report = build("coverage", since="2026-11-19", until="2026-11-19")
        (row,) = report.rows
        assert (row["reached_static"], row["static_answers"], row["degraded"]) == (4, 3, 1)
        assert (row["coverage_pct"], row["target_pct"], row["verdict"]) == (75.0, 60, "on target")

    def test_below_the_target_says_so_per_client(self):
        fallback("static", when=at(19), client="web")
        fallback("degraded", when=at(19), client="web")
        fallback("degraded", when=at(19), client="app")
        report = build("coverage", since="2026-11-19", until="2026-11-19", group="client")
        verdicts = [(r["client"], r["coverage_pct"], r["verdict"]) for r in report.rows]
        assert verdicts == [("app", 0.0, "below target"), ("web", 50.0, "below target")]
        assert "below target" in report.headline and "at least 60 %" in report.headline


class TestIncidents:
    def test_it_counts_the_requests_per_tier_and_the_cloud_cost_while_it_lasted(self):
        Incident.objects.create(
            provider=LOCAL, started_at=at(19, 10), ended_at=at(19, 11, 30), reason="timeout"
        )
        answered(when=at(19, 9, 59))  # before
        answered(CLOUD, when=at(19, 10), cost="0.10")
        answered(CLOUD, when=at(19, 11), cost="0.05")
        fallback("static", when=at(19, 10, 30))
        fallback("degraded", when=at(19, 11, 29))
        answered(when=at(19, 11, 30))  # after: it had recovered
        answered(CLOUD, when=at(19, 12), cost="9")  # after

        report = build("incidents", since="2026-11-19", until="2026-11-19")
        (row,) = report.rows
        assert row["provider"] == LOCAL and row["reason"] == "timeout"
        assert (row["started_at"], row["ended_at"]) == (
            "2026-11-19T10:00:00+00:00",
            "2026-11-19T11:30:00+00:00",
        )
        assert (row["length_s"], row["ongoing"]) == (5400, False)
        served = {tier: row[f"requests_{tier}"] for tier in ("primary", "secondary", "static")}
        assert served == {"primary": 0, "secondary": 2, "static": 1}
        assert (row["requests_degraded"], row["requests"]) == (1, 4)
        assert row["cloud_cost"] == Decimal("0.15")
        assert "1 incident, 1 h 30 min out in all, cloud cost 0.1500 EUR" in report.headline

    def test_an_ongoing_one_runs_to_now_and_only_overlapping_ones_are_listed(self):
        Incident.objects.create(provider=LOCAL, started_at=at(10), ended_at=at(10, 13))
        Incident.objects.create(provider=CLOUD, started_at=NOW - timedelta(minutes=20))
        answered(when=NOW - timedelta(minutes=5))
        (row,) = build("incidents", since="2026-11-19", until="2026-11-20").rows
        assert (row["provider"], row["ongoing"], row["ended_at"]) == (CLOUD, True, "")
        assert (row["length_s"], row["requests_primary"]) == (1200, 1)


class TestCommand:
    def test_csv_has_a_header_and_parses_back_to_the_figures(self):
        answered(CLOUD, when=at(19), cost="0.5", client="web")
        answered(when=at(19), client="web")
        output = run("spend", "--since", "2026-11-19", "--until", "2026-11-19", "--format", "csv")
        rows = list(csv.DictReader(io.StringIO(output)))
        assert list(rows[0]) == [
            "period", "provider", "requests", "tokens_in", "tokens_out", "cost", "currency",
        ]  # fmt: skip
        assert [(r["provider"], r["requests"], Decimal(r["cost"])) for r in rows] == [
            (LOCAL, "1", Decimal("0")),
            (CLOUD, "1", Decimal("0.5")),
        ]
        query = report_query(report="spend", now=datetime.now(UTC), since="2026-11-19",
                             until="2026-11-19")  # fmt: skip
        assert output == report_csv(report_build(query))

    def test_json_is_a_list_of_objects(self):
        for tier in ("static", "static", "degraded"):
            fallback(tier, when=at(19))
        output = run("coverage", "--since=2026-11-19", "--until=2026-11-19", "--format=json")
        (row,) = json.loads(output)
        assert row["period"] == "2026-11-19"
        assert (row["static_answers"], row["coverage_pct"], row["verdict"]) == (
            2,
            66.67,
            "on target",
        )

    def test_incidents_and_cloud_share_as_csv(self):
        Incident.objects.create(provider=LOCAL, started_at=at(19, 10), ended_at=at(19, 11))
        answered(CLOUD, when=at(19, 10, 30), cost="0.2")
        dates = ("--since", "2026-11-19", "--until", "2026-11-19", "--format", "csv")
        (incident,) = csv.DictReader(io.StringIO(run("incidents", *dates)))
        assert (incident["requests_secondary"], incident["cloud_cost"]) == ("1", "0.20000000")
        assert incident["ongoing"] == "false"
        (share,) = csv.DictReader(io.StringIO(run("cloud-share", "--by", "month", *dates)))
        assert (share["period"], share["cloud_share_pct"]) == ("2026-11", "100.00")

    def test_text_is_a_table_with_the_headline(self):
        answered(CLOUD, when=at(19), cost="1.5")
        output = run("spend", "--since", "2026-11-19", "--until", "2026-11-19")
        assert output.splitlines()[3].split() == [
            "period", "provider", "requests", "tokens_in", "tokens_out", "cost", "currency",
        ]  # fmt: skip
        assert "1 request, 30 tokens, 1.50 EUR in all." in output

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("spend", "--since", "2026-13-01"), "--since: '2026-13-01' is not a date"),
            (("spend", "--since", "2026-11-20", "--until", "2026-11-01"), "starts (2026-11-20)"),
            (("spend", "--since", "2020-01-01", "--until", "2026-01-01"), "at most 731 days"),
            (("coverage", "--group", "provider"), "--group: the coverage report is grouped by"),
            (("incidents", "--by", "month"), "--by: the incidents report lists incidents"),
            (("budget",), "invalid choice: 'budget'"),
            (("spend", "--format", "xml"), "invalid choice: 'xml'"),
        ],
    )
    def test_bad_options_are_refused_with_a_clear_message(self, args, message):
        with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
            run(*args)
