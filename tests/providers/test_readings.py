"""The admission's memory of the last reply: trusted only young, and only for a closed breaker."""

from __future__ import annotations

import pytest

from gateway.engine.breaker import BreakerState, Mode, State
from gateway.routing.readings import Readings

pytestmark = pytest.mark.backend_free

CLOSED = BreakerState()


def test_a_reply_heard_just_now_admits_without_a_read():
    readings = Readings(max_age_s=0.5)
    readings.note("ollama", CLOSED, {"spend:1:2026-12-01": 0.25}, now=10.0)
    assert readings.lookup("ollama", ["spend:1:2026-12-01"], now=10.4) == (
        CLOSED,
        {"spend:1:2026-12-01": 0.25},
    )


def test_a_reply_older_than_the_limit_is_read_afresh():
    readings = Readings(max_age_s=0.5)
    readings.note("ollama", CLOSED, {}, now=10.0)
    assert readings.lookup("ollama", [], now=10.6) is None


def test_a_spend_key_never_heard_of_is_read_afresh():
    readings = Readings(max_age_s=0.5)
    readings.note("ollama", CLOSED, {"spend:1:day": 1.0}, now=10.0)
    assert readings.lookup("ollama", ["spend:1:day", "spend:2:day"], now=10.1) is None


@pytest.mark.parametrize(
    "state",
    [BreakerState(state=State.HALF_OPEN), BreakerState(mode=Mode.DISABLED)],
    ids=["half-open", "forced-open"],
)
def test_a_half_open_or_forced_open_breaker_is_always_read_afresh(state):
    readings = Readings(max_age_s=0.5)
    readings.note("ollama", state, {}, now=10.0)
    assert readings.lookup("ollama", [], now=10.0) is None


def test_an_open_breaker_is_trusted_while_young_so_a_provider_down_costs_no_round_trip():
    readings = Readings(max_age_s=0.5)
    opened = BreakerState(state=State.OPEN, version=3, open_until=1_000_060.0)
    readings.note("ollama", opened, {}, now=10.0)
    assert readings.lookup("ollama", [], now=10.4) == (opened, {})
    assert readings.lookup("ollama", [], now=10.6) is None


def test_a_forgotten_breaker_and_a_cleared_memory_are_read_afresh():
    readings = Readings(max_age_s=0.5)
    readings.note("ollama", CLOSED, {}, now=10.0)
    readings.note("cloud", CLOSED, {}, now=10.0)
    readings.forget("ollama")
    assert readings.lookup("ollama", [], now=10.1) is None
    assert readings.lookup("cloud", [], now=10.1) is not None
    readings.clear()
    assert readings.lookup("cloud", [], now=10.1) is None


def test_with_no_round_trip_to_save_nothing_is_kept():
    readings = Readings(max_age_s=0)
    readings.note("ollama", CLOSED, {}, now=10.0)
    assert readings.lookup("ollama", [], now=10.0) is None
