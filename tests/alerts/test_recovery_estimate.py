"""The static tier's recovery estimate: the pure rule with a moved clock, then the alert it
goes into, from real incident rows and, end to end, from the breakers real requests opened."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from alerts.estimate import Outage, earliest, recovery_estimate, span, spoken, spoken_roughly
from alerts.models import AlertEvent
from alerts.raising import _Throttle, static_tier_active
from providers.models import Incident, IncidentClosedReason
from runtime import outcomes
from tests.providers.conftest import ask

MIN = 60.0
NOW = 1_780_000_000.0
# Five past incidents of 6 to 12 minutes, newest first: median 8.
PAST = [7 * MIN, 12 * MIN, 6 * MIN, 8 * MIN, 10 * MIN]


@pytest.fixture
def nothing_delivered(monkeypatch):
    """Delivery is the channels' business (test_delivery.py): here only what is raised."""
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kwargs: None)


class TestTheRule:
    def test_with_no_past_incidents_it_is_the_next_probe_and_says_so(self):
        outage = Outage("ollama-local", next_probe_at=NOW + 40, started_at=NOW - 20)
        estimate = recovery_estimate(outage, [], now=NOW)
        assert estimate.in_s == 40
        assert estimate.basis == "no past incidents: at the earliest at the next probe, in 40 s"
        assert estimate.headline == "Recovery estimated: 40 s"

    def test_it_is_the_median_of_the_last_incidents_from_the_outages_start(self):
        outage = Outage("ollama-local", next_probe_at=NOW + 40, started_at=NOW)
        estimate = recovery_estimate(outage, PAST, now=NOW)
        assert estimate.in_s == 8 * MIN
        assert estimate.headline == "Recovery estimated: 8 minutes"
        assert estimate.basis == (
            "next probe in 40 s; its last 5 incidents lasted 6–12 min, median 8 min"
        )

    def test_as_the_clock_moves_what_this_one_has_lasted_comes_off(self):
        outage = Outage("ollama-local", next_probe_at=NOW + 4 * MIN, started_at=NOW)
        later = NOW + 3 * MIN
        estimate = recovery_estimate(outage, PAST, now=later)
        assert estimate.in_s == 5 * MIN
        assert estimate.headline == "Recovery estimated: 5 minutes"
        assert estimate.basis.endswith("median 8 min; this one has lasted 3 min")

    def test_it_is_never_before_the_next_probe(self):
        # 11 minutes in, past the median; the breaker re-opened for another 4 minutes.
        outage = Outage("ollama-local", next_probe_at=NOW + 15 * MIN, started_at=NOW)
        estimate = recovery_estimate(outage, PAST, now=NOW + 11 * MIN)
        assert estimate.in_s == 4 * MIN
        assert estimate.basis == (
            "next probe in 4 min; its last 5 incidents lasted 6–12 min, median 8 min; "
            "this one has lasted 11 min, so not before the next probe"
        )

    def test_a_half_open_breaker_has_its_probe_due_now(self):
        outage = Outage("ollama-local", next_probe_at=0.0, started_at=NOW - 30)
        estimate = recovery_estimate(outage, [], now=NOW)
        assert estimate.in_s == 0
        assert estimate.basis == "no past incidents: at the earliest at the next probe, now"
        assert estimate.headline == "Recovery estimated: any moment (a probe is due now)"

    def test_one_past_incident_is_named_as_one(self):
        outage = Outage("ollama-local", next_probe_at=NOW + 10, started_at=NOW)
        estimate = recovery_estimate(outage, [45.0], now=NOW)
        assert estimate.basis == "next probe in 10 s; its last incident lasted 45 s, median 45 s"

    def test_the_static_tier_ends_with_the_first_provider_expected_back(self):
        local = recovery_estimate(Outage("ollama-local", NOW + 40, NOW), PAST, now=NOW)
        cloud = recovery_estimate(Outage("openai-cloud", NOW + 90, NOW), [], now=NOW)
        assert earliest([local, cloud]) == cloud
        assert earliest([]) is None

    def test_durations_read_as_an_operator_says_them(self):
        assert [spoken(s) for s in (0.4, 40, 89, 90, 480, 7199, 7500)] == [
            "0 s", "40 s", "89 s", "2 min", "8 min", "2 h", "2 h 5 min",
        ]  # fmt: skip
        assert [spoken_roughly(s) for s in (59, 60, 89, 450)] == [
            "59 s", "1 minute", "1 minute", "8 minutes",
        ]  # fmt: skip
        assert (span(360, 720), span(40, 75), span(480, 500)) == ("6–12 min", "40–75 s", "8 min")


def incidents_lasting(provider: str, lengths_s: list[float], *, before: datetime) -> None:
    """Closed incidents of the provider, the newest ending an hour before `before`."""
    end = before - timedelta(hours=1)
    for length in lengths_s:
        Incident.objects.create(
            provider=provider, started_at=end - timedelta(seconds=length), ended_at=end
        )
        end -= timedelta(days=1)


@pytest.mark.django_db
class TestTheStaticTierAlert:
    def test_it_carries_the_estimate_and_how_it_was_made(self, nothing_delivered):
        now = datetime.now(UTC)
        incidents_lasting("ollama-local", PAST, before=now)
        # Ended by an operator or at a restart: not how long the provider takes.
        for reason in (IncidentClosedReason.OPERATOR, IncidentClosedReason.RESTART):
            Incident.objects.create(
                provider="ollama-local",
                started_at=now - timedelta(minutes=30),
                ended_at=now - timedelta(minutes=29),
                closed_reason=reason,
            )
        Incident.objects.create(provider="ollama-local", started_at=now - timedelta(minutes=2))
        at = now.timestamp()
        # The breaker re-opened a minute ago; the outage is dated from its incident.
        outage = Outage("ollama-local", next_probe_at=at + 40, started_at=at - 60)

        event = static_tier_active("all_providers_failed", [outage], now=at)

        assert event.title == "Tertiary fallback active. Recovery estimated: 6 minutes"
        assert event.message == (
            "No provider is answering: static answers only. Requests are answered from the "
            "static tier or the apology (all_providers_failed).\n"
            "Recovery estimated: 6 minutes (ollama-local: next probe in 40 s; its last 5 "
            "incidents lasted 6–12 min, median 8 min; this one has lasted 2 min)."
        )
        assert event.data["recovery_estimate_s"] == 360
        assert event.data["recovery_provider"] == "ollama-local"

    def test_with_no_history_it_says_so(self, nothing_delivered):
        at = time.time()
        event = static_tier_active(
            "all_providers_failed", [Outage("ollama-local", at + 40, at)], now=at
        )
        assert event.title == "Tertiary fallback active. Recovery estimated: 40 s"
        assert event.message.endswith(
            "Recovery estimated: 40 s (ollama-local: no past incidents: at the earliest at the "
            "next probe, in 40 s)."
        )

    def test_with_no_breaker_out_there_is_no_estimate(self, nothing_delivered):
        event = static_tier_active("all_providers_skipped")
        assert event.title == "Tertiary fallback active. Recovery: no estimate"
        assert event.data["recovery_estimate_s"] is None


@pytest.mark.django_db(transaction=True)
async def test_the_breakers_real_requests_opened_give_the_estimate(
    api, gateway, primary, secondary, nothing_delivered, monkeypatch
):
    monkeypatch.setattr(outcomes, "request_throttle", _Throttle(every_s=10.0))
    primary.stop()
    secondary.stop()
    for _ in range(3):  # three refused calls in a row open both breakers
        assert (await ask(api, "What are your office hours?")).json()["tier"] == "static"
    deadline = time.monotonic() + 5
    while not await sync_to_async(AlertEvent.objects.filter(kind="static_tier").exists)():
        assert time.monotonic() < deadline, "no static-tier alert"
        await asyncio.sleep(0.05)
    event = await sync_to_async(AlertEvent.objects.get)(kind="static_tier")
    # The first static answer came before any breaker had opened: the estimate waited for them
    # (the test's clock stands still: the cooldown, 60 s, is all there is to wait).
    assert event.title == "Tertiary fallback active. Recovery estimated: 1 minute"
    assert re.search(
        r"\((ollama-local|openai-cloud): no past incidents: at the earliest at the next probe, "
        r"in 60 s\)\.$",
        event.message,
    )
