"""The circuit breaker as a pure state machine: plain numbers for the clock, no I/O, no sleeping.
Each test hands `admit`/`on_outcome` a state and asserts on the state and the events returned."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.engine.breaker import (
    Admission,
    BreakerEvent,
    BreakerState,
    EventKind,
    Mode,
    Outcome,
    State,
    WindowStats,
    admit,
    cooldown_for,
    needs_window,
    on_outcome,
)
from gateway.engine.config import PolicyConfig

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = pytest.mark.backend_free

NAME = "ollama-local"
POLICY = PolicyConfig()  # the defaults: 3 failures, 30 % of ≥ 5 calls, 60 s × 2^n up to 600 s
T0 = 1_700_000_000.0


def failure(latency_s: float = 0.2, error_class: str = "timeout") -> Outcome:
    return Outcome(ok=False, latency_s=latency_s, breaker_failure=True, error_class=error_class)


def success(latency_s: float = 0.2) -> Outcome:
    return Outcome(ok=True, latency_s=latency_s)


def rate_limited(retry_after_s: float | None) -> Outcome:
    return Outcome(
        ok=False, latency_s=0.1, cool_down=True, retry_after_s=retry_after_s, error_class="429"
    )


def auth_error() -> Outcome:
    return Outcome(ok=False, latency_s=0.1, opens_breaker=True, error_class="auth")


def opened(*, at: float = T0, cooldown_s: float = 60, reopens: int = 1, version: int = 1):
    return BreakerState(
        state=State.OPEN,
        version=version,
        opened_at=at,
        open_until=at + cooldown_s,
        reopens=reopens,
        reason="consecutive_failures",
    )


def half_open(
    *, at: float = T0, reopens: int = 1, version: int = 2, admitted: int = 0, succeeded: int = 0
) -> BreakerState:
    return BreakerState(
        state=State.HALF_OPEN,
        version=version,
        opened_at=at - 60,
        open_until=at,
        half_opened_at=at,
        reopens=reopens,
        probes_admitted=admitted,
        probes_succeeded=succeeded,
        reason="consecutive_failures",
    )


def opened_event(reason: str, cooldown_s: float, at: float = T0) -> BreakerEvent:
    return BreakerEvent(EventKind.OPENED, NAME, at, reason, cooldown_s)


# --- CLOSED ------------------------------------------------------------------------------------


def test_a_closed_breaker_admits_a_call_without_transition_or_events():
    decision = admit(NAME, BreakerState(), POLICY, T0)
    assert decision.admission == Admission.ALLOW
    assert (decision.reason, decision.transition, decision.events) == ("", None, ())


def test_it_opens_after_three_consecutive_failures():
    current = BreakerState(consecutive_failures=3)  # the store has counted this failure
    new, events = on_outcome(NAME, current, None, failure(), POLICY, T0, was_probe=False)
    assert new == BreakerState(
        state=State.OPEN,
        version=1,
        opened_at=T0,
        open_until=T0 + 60,
        reopens=1,
        reason="consecutive_failures",
    )
    assert events == (opened_event("consecutive_failures", 60.0),)
    assert new.seconds_to_half_open(T0 + 15) == 45


def test_two_consecutive_failures_leave_it_closed():
    current = BreakerState(consecutive_failures=2)
    assert on_outcome(NAME, current, None, failure(), POLICY, T0, was_probe=False) == (None, ())


@pytest.mark.parametrize(
    ("calls", "failures"),
    [(5, 2), (10, 3)],  # 40 % and exactly 30 %
)
def test_it_opens_when_at_least_thirty_percent_of_five_or_more_calls_fail(calls, failures):
    current = BreakerState(consecutive_failures=1)  # failures interleaved with successes
    stats = WindowStats(calls=calls, failures=failures, p95_calls=calls)
    new, events = on_outcome(NAME, current, stats, failure(), POLICY, T0, was_probe=False)
    assert new is not None and new.state == State.OPEN and new.reason == "failure_rate"
    assert events == (opened_event("failure_rate", 60.0),)


def test_a_failure_rate_under_thirty_percent_leaves_it_closed():
    stats = WindowStats(calls=10, failures=2, p95_calls=10)
    current = BreakerState(consecutive_failures=1)
    assert on_outcome(NAME, current, stats, failure(), POLICY, T0, was_probe=False) == (None, ())


def test_a_high_failure_rate_over_only_four_calls_leaves_it_closed():
    stats = WindowStats(calls=4, failures=2, p95_calls=4)
    current = BreakerState(consecutive_failures=1)
    assert on_outcome(NAME, current, stats, failure(), POLICY, T0, was_probe=False) == (None, ())


def test_it_opens_when_half_the_calls_are_slow():
    stats = WindowStats(calls=6, slow=3, p95_calls=6, over_p95=0)
    new, events = on_outcome(NAME, BreakerState(), stats, success(9.0), POLICY, T0, was_probe=False)
    assert new is not None and new.state == State.OPEN
    assert events == (opened_event("slow_calls", 60.0),)


def test_fewer_than_half_slow_calls_leave_it_closed():
    policy = PolicyConfig(p95_latency_s=60)  # so 9 s calls don't trip the p95 rule instead
    stats = WindowStats(calls=6, slow=2, p95_calls=6, over_p95=0)
    assert on_outcome(NAME, BreakerState(), stats, success(9.0), policy, T0, was_probe=False) == (
        None,
        (),
    )


def test_it_opens_when_the_p95_is_over_its_limit_for_both_minutes_of_the_window():
    # 10 % of the calls over 5 s in each minute of the 120 s window.
    stats = WindowStats(calls=20, p95_calls=20, over_p95=2, p95_calls_recent=10, over_p95_recent=1)
    new, events = on_outcome(NAME, BreakerState(), stats, success(6.0), POLICY, T0, was_probe=False)
    assert new is not None and new.state == State.OPEN
    assert events == (opened_event("p95_latency", 60.0),)


@pytest.mark.parametrize(
    "stats",
    [
        # exactly 5 % in each minute: not more than
        WindowStats(calls=40, p95_calls=40, over_p95=2, p95_calls_recent=20, over_p95_recent=1),
        # under the minimum of calls in a minute
        WindowStats(calls=8, p95_calls=8, over_p95=8, p95_calls_recent=4, over_p95_recent=4),
        # one slow call among ten, in the last minute only: a moment, not a sustained latency
        WindowStats(calls=20, p95_calls=20, over_p95=1, p95_calls_recent=10, over_p95_recent=1),
        # the earlier minute was slow, the last one isn't any more
        WindowStats(calls=20, p95_calls=20, over_p95=5, p95_calls_recent=10, over_p95_recent=0),
    ],
)
def test_the_p95_rule_needs_more_than_five_percent_and_the_minimum_of_calls(stats):
    assert on_outcome(NAME, BreakerState(), stats, success(6.0), POLICY, T0, was_probe=False) == (
        None,
        (),
    )


@pytest.mark.parametrize(
    ("outcome", "needed"),
    [
        (success(0.2), False),
        (success(4.9), False),
        (failure(0.2), True),
        (success(8.0), True),  # slow
        (success(5.5), True),  # over the p95 limit
    ],
)
def test_only_failures_and_slow_calls_need_the_window_sums(outcome, needed):
    assert needs_window(outcome, POLICY) is needed


def test_an_open_breaker_ignores_late_failures_of_calls_admitted_before_it_opened():
    current = replace(opened(), consecutive_failures=5)
    stats = WindowStats(calls=10, failures=10, p95_calls=10)
    assert on_outcome(NAME, current, stats, failure(), POLICY, T0 + 1, was_probe=False) == (
        None,
        (),
    )


# --- OPEN → HALF_OPEN --------------------------------------------------------------------------


def test_an_open_breaker_rejects_until_its_cooldown_ends():
    decision = admit(NAME, opened(), POLICY, T0 + 59.9)
    assert (decision.admission, decision.reason) == (Admission.REJECT, "breaker_open")
    assert (decision.transition, decision.events) == (None, ())


def test_at_the_end_of_its_cooldown_it_half_opens_and_admits_a_probe():
    current = opened()
    decision = admit(NAME, current, POLICY, T0 + 60)
    assert decision.admission == Admission.PROBE
    assert decision.transition == replace(
        current, state=State.HALF_OPEN, version=2, half_opened_at=T0 + 60
    )
    assert decision.events == (
        BreakerEvent(EventKind.HALF_OPENED, NAME, T0 + 60, "consecutive_failures"),
    )


# --- HALF_OPEN ---------------------------------------------------------------------------------


@pytest.mark.parametrize("admitted", [0, 1, 2])
def test_half_open_admits_probes_while_slots_are_left(admitted):
    decision = admit(NAME, half_open(admitted=admitted), POLICY, T0 + 1)
    assert decision.admission == Admission.PROBE
    assert (decision.transition, decision.events) == (None, ())


def test_half_open_rejects_once_every_probe_slot_is_taken():
    decision = admit(NAME, half_open(admitted=3), POLICY, T0 + 1)
    assert (decision.admission, decision.reason) == (Admission.REJECT, "probe_rejected")
    assert decision.transition is None
    assert decision.events == (BreakerEvent(EventKind.PROBE_REJECTED, NAME, T0 + 1),)


def test_three_successful_probes_close_it_and_reset_the_backoff():
    current = half_open(reopens=3, admitted=3, succeeded=3)
    new, events = on_outcome(NAME, current, None, success(), POLICY, T0 + 5, was_probe=True)
    assert new is not None
    assert (new.state, new.version, new.reopens) == (State.CLOSED, 3, 0)
    assert (new.probes_admitted, new.probes_succeeded, new.open_until) == (0, 0, 0.0)
    assert events == (BreakerEvent(EventKind.CLOSED, NAME, T0 + 5, "consecutive_failures"),)


def test_a_successful_probe_before_the_last_one_changes_nothing():
    current = half_open(admitted=3, succeeded=2)
    assert on_outcome(NAME, current, None, success(), POLICY, T0 + 5, was_probe=True) == (None, ())


def test_a_failed_probe_reopens_it_with_the_next_cooldown():
    current = half_open(reopens=1, admitted=2, succeeded=1)
    new, events = on_outcome(NAME, current, None, failure(), POLICY, T0 + 5, was_probe=True)
    assert new is not None
    assert (new.state, new.version, new.reopens, new.reason) == (State.OPEN, 3, 2, "probe_failed")
    assert (new.opened_at, new.open_until) == (T0 + 5, T0 + 5 + 120)
    assert (new.probes_admitted, new.probes_succeeded) == (0, 0)
    assert events == (opened_event("probe_failed", 120.0, at=T0 + 5),)


def test_a_non_probe_result_in_half_open_changes_nothing():
    current = half_open(admitted=3, succeeded=3)
    for outcome in (failure(), success()):
        assert on_outcome(NAME, current, None, outcome, POLICY, T0 + 1, was_probe=False) == (
            None,
            (),
        )


def test_a_stale_half_open_lets_a_new_probe_through():
    policy = PolicyConfig(request_deadline_s=10)  # stale after 2 × 10 s without a result
    current = half_open(admitted=3, succeeded=1)
    still_waiting = admit(NAME, current, policy, T0 + 20)
    assert (still_waiting.admission, still_waiting.reason) == (Admission.REJECT, "probe_rejected")

    decision = admit(NAME, current, policy, T0 + 20.5)
    assert decision.admission == Admission.PROBE
    assert decision.transition == replace(
        current, version=3, half_opened_at=T0 + 20.5, probes_admitted=0, probes_succeeded=0
    )


# --- Backoff -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reopens", "cooldown"),
    [(0, 60.0), (1, 120.0), (2, 240.0), (3, 480.0), (4, 600.0), (10, 600.0)],
)
def test_the_cooldown_doubles_with_each_reopen_up_to_the_cap(reopens, cooldown):
    assert cooldown_for(reopens, POLICY) == cooldown


def test_failed_probes_grow_the_cooldown_until_a_clean_close_resets_it():
    now = T0
    current, events = on_outcome(
        NAME, BreakerState(consecutive_failures=3), None, failure(), POLICY, now, was_probe=False
    )
    cooldowns = [events[0].cooldown_s]
    for _ in range(5):
        assert current is not None
        now = current.open_until
        decision = admit(NAME, current, POLICY, now)
        assert decision.transition is not None
        probing = replace(decision.transition, probes_admitted=1)
        current, events = on_outcome(NAME, probing, None, failure(), POLICY, now, was_probe=True)
        cooldowns.append(events[0].cooldown_s)
    assert cooldowns == [60.0, 120.0, 240.0, 480.0, 600.0, 600.0]

    assert current is not None
    now = current.open_until
    decision = admit(NAME, current, POLICY, now)
    assert decision.transition is not None
    all_good = replace(decision.transition, probes_admitted=3, probes_succeeded=3)
    closed, _ = on_outcome(NAME, all_good, None, success(), POLICY, now, was_probe=True)
    assert closed is not None and closed.state == State.CLOSED
    failing = replace(closed, consecutive_failures=3)
    again, events = on_outcome(NAME, failing, None, failure(), POLICY, now + 1, was_probe=False)
    assert again is not None and again.open_until == now + 1 + 60
    assert events == (opened_event("consecutive_failures", 60.0, at=now + 1),)


@pytest.mark.parametrize(
    ("reopens", "policy"),
    [
        (1024, POLICY),  # 2.0 ** 1024 is past the largest float: a provider down for a week
        (2, PolicyConfig(cooldown_multiplier=1e200)),  # any multiplier the form takes
    ],
)
def test_a_failed_probe_after_countless_reopens_opens_it_for_the_capped_cooldown(reopens, policy):
    current = half_open(reopens=reopens, admitted=1)
    new, events = on_outcome(NAME, current, None, failure(), policy, T0 + 5, was_probe=True)
    assert new is not None and (new.state, new.reopens) == (State.OPEN, reopens + 1)
    assert new.open_until == T0 + 5 + 600
    assert events == (opened_event("probe_failed", 600.0, at=T0 + 5),)


# --- Errors that open at once --------------------------------------------------------------------


def test_a_429_with_retry_after_opens_for_exactly_that_long_without_growing_the_backoff():
    current = BreakerState(reopens=2, version=7)
    new, events = on_outcome(NAME, current, None, rate_limited(17.0), POLICY, T0, was_probe=False)
    assert new is not None
    assert (new.state, new.version, new.reason) == (State.OPEN, 8, "rate_limited")
    assert (new.open_until, new.reopens) == (T0 + 17, 2)
    assert events == (opened_event("rate_limited", 17.0),)


def test_a_429_without_retry_after_opens_for_the_base_cooldown():
    current = BreakerState(reopens=2)
    new, events = on_outcome(NAME, current, None, rate_limited(None), POLICY, T0, was_probe=False)
    assert new is not None and (new.open_until, new.reopens) == (T0 + 60, 2)
    assert events == (opened_event("rate_limited", 60.0),)


def test_an_auth_error_opens_it_at_once():
    new, events = on_outcome(NAME, BreakerState(), None, auth_error(), POLICY, T0, was_probe=False)
    assert new is not None
    assert (new.state, new.reason, new.open_until, new.reopens) == (State.OPEN, "auth", T0 + 60, 1)
    assert events == (opened_event("auth", 60.0),)


# --- Operator modes ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [BreakerState(), opened(), half_open()])
def test_a_disabled_provider_is_always_rejected(state):
    decision = admit(NAME, replace(state, mode=Mode.DISABLED), POLICY, T0 + 1000)
    assert (decision.admission, decision.reason) == (Admission.REJECT, "disabled")
    assert (decision.transition, decision.events) == (None, ())


@pytest.mark.parametrize("state", [BreakerState(), opened(), half_open(admitted=3)])
def test_a_forced_closed_provider_is_always_admitted(state):
    decision = admit(NAME, replace(state, mode=Mode.FORCED_CLOSED), POLICY, T0 + 1)
    assert decision.admission == Admission.ALLOW
    assert (decision.transition, decision.events) == (None, ())


@pytest.mark.parametrize("mode", [Mode.FORCED_CLOSED, Mode.DISABLED])
@pytest.mark.parametrize("outcome", [failure(), auth_error(), rate_limited(5.0), success(9.0)])
def test_an_operator_mode_never_transitions_on_an_outcome(mode, outcome):
    current = BreakerState(mode=mode, consecutive_failures=10)
    stats = WindowStats(calls=10, failures=10, slow=10, p95_calls=10, over_p95=10)
    assert on_outcome(NAME, current, stats, outcome, POLICY, T0, was_probe=False) == (None, ())


def test_a_round_whose_last_probe_is_recent_is_not_taken_for_lost():
    from gateway.engine.breaker import Admission, BreakerState, State, admit
    from gateway.engine.config import PolicyConfig

    policy = PolicyConfig(half_open_probes=3, request_deadline_s=30)
    current = BreakerState(
        state=State.HALF_OPEN, version=4, half_opened_at=100.0, last_probe_at=150.0,
        probes_admitted=3,
    )  # fmt: skip
    assert admit("p", current, policy, now=161.0).admission == Admission.REJECT
    assert admit("p", current, policy, now=211.0).admission == Admission.PROBE
