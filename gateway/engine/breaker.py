"""The circuit breaker as pure code: plain data in, plain data and events out, the clock passed in.

One breaker per provider, shared by every serving process through the state store. This module
decides; the store applies its decisions atomically (a transition names the version it was made
from, and loses if another process moved first).

- CLOSED → OPEN on: N consecutive failures (a call still waiting past its stuck threshold,
  `stuck_after`, counts as one without waiting for its timeout); failure rate over a window
  with a minimum of calls; slow-call rate; p95 latency over its limit, held in both halves of
  its window; an auth error at once; a 429 for its Retry-After.
- OPEN for cooldown × multiplier^reopens, capped, then HALF_OPEN.
- HALF_OPEN admits exactly N probes in total; all succeed → CLOSED (backoff resets); one fails →
  OPEN with the next cooldown.
- Operator modes: disabled (always open) and forced closed (always admits).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from gateway.engine.config import PolicyConfig
from gateway.engine.reasons import SkipReason

# p95 above the limit ⇔ more than 5 % of the calls in the window took longer than the limit.
P95_SHARE = 0.05


class State(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Mode(StrEnum):
    AUTO = "auto"
    DISABLED = "disabled"  # forced open by an operator
    FORCED_CLOSED = "forced_closed"  # breaker ignored by an operator


class EventKind(StrEnum):
    OPENED = "opened"
    HALF_OPENED = "half_opened"
    CLOSED = "closed"
    PROBE_REJECTED = "probe_rejected"


@dataclass(frozen=True, slots=True)
class BreakerState:
    state: State = State.CLOSED
    mode: Mode = Mode.AUTO
    version: int = 0
    consecutive_failures: int = 0
    opened_at: float = 0.0
    open_until: float = 0.0
    half_opened_at: float = 0.0
    last_probe_at: float = 0.0  # when the last probe slot was taken
    closed_at: float = 0.0  # calls before this don't count toward tripping it again
    reopens: int = 0  # opens since the last clean close: the cooldown's exponent
    probes_admitted: int = 0
    probes_succeeded: int = 0
    reason: str = ""  # why it last opened
    # The sentinel's verdict (health.Health), filled in by `StateStore.read` from a key of its
    # own in the same round trip; breaker writes never carry it.
    health: str = "unknown"

    def seconds_to_half_open(self, now: float) -> float:
        return max(0.0, self.open_until - now) if self.state == State.OPEN else 0.0


@dataclass(frozen=True, slots=True)
class WindowStats:
    calls: int = 0  # in the failure window
    failures: int = 0
    slow: int = 0
    p95_calls: int = 0  # in the p95 window
    over_p95: int = 0
    # In the p95 window's later half (the last of its two minutes, by default); the earlier
    # half is the rest.
    p95_calls_recent: int = 0
    over_p95_recent: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One finished call, as the breaker sees it."""

    ok: bool
    latency_s: float
    breaker_failure: bool = False
    opens_breaker: bool = False
    cool_down: bool = False
    retry_after_s: float | None = None
    error_class: str = ""


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    kind: EventKind
    provider: str
    at: float
    reason: str = ""
    cooldown_s: float = 0.0


class Admission(StrEnum):
    ALLOW = "allow"
    PROBE = "probe"  # allowed if the store grants one of the half-open probe slots
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class Decision:
    admission: Admission
    reason: str = ""  # why rejected: breaker_open, probe_rejected, disabled
    transition: BreakerState | None = None  # to apply (by version) before admitting
    events: tuple[BreakerEvent, ...] = ()


def is_slow(latency_s: float, policy: PolicyConfig) -> bool:
    return latency_s > policy.slow_call_s


def is_over_p95(latency_s: float, policy: PolicyConfig) -> bool:
    return latency_s > policy.p95_latency_s


STUCK = "stuck"  # the error class of a call counted while still waiting


def stuck_after(p99_s: float | None, policy: PolicyConfig) -> float:
    """How long a call may wait on its provider before it counts as a failure while still in
    flight: `stuck_multiplier` × the provider's recent p99, within the policy's floor and cap.
    A model that normally takes 4–8 s isn't stuck at 9 s; one that answers in milliseconds is
    at the floor (1 s). With no recent answers to judge by, the cap."""
    if p99_s is None:
        return policy.stuck_cap_s
    return min(policy.stuck_cap_s, max(policy.stuck_floor_s, policy.stuck_multiplier * p99_s))


def stuck_outcome(stuck_s: float) -> Outcome:
    """A call still in flight past its stuck threshold, as the breaker counts it: a failure."""
    return Outcome(ok=False, latency_s=stuck_s, breaker_failure=True, error_class=STUCK)


def cooldown_for(reopens: int, policy: PolicyConfig) -> float:
    try:
        grown = policy.cooldown_s * policy.cooldown_multiplier**reopens
    except OverflowError:
        # Reopens keep counting while a provider stays down, and a float power raises past
        # ~1.8e308 (2.0 ** 1024: a thousand failed rounds at the default backoff). By then the
        # cooldown is long at its cap.
        grown = policy.max_cooldown_s
    return float(min(grown, policy.max_cooldown_s))


def admit(name: str, current: BreakerState, policy: PolicyConfig, now: float) -> Decision:
    """May a call go to this provider now?"""
    if current.mode == Mode.DISABLED:
        return Decision(Admission.REJECT, SkipReason.DISABLED)
    if current.mode == Mode.FORCED_CLOSED or current.state == State.CLOSED:
        return Decision(Admission.ALLOW)
    if current.state == State.OPEN:
        if now < current.open_until:
            return Decision(Admission.REJECT, SkipReason.BREAKER_OPEN)
        half_open = _half_open(current, now)
        event = BreakerEvent(EventKind.HALF_OPENED, name, now, current.reason)
        return Decision(Admission.PROBE, transition=half_open, events=(event,))
    if current.probes_admitted < policy.half_open_probes:
        return Decision(Admission.PROBE)
    if now - max(current.half_opened_at, current.last_probe_at) > _probe_stale_after(policy):
        # Every probe slot was taken and none reported back (its process died): start over.
        event = BreakerEvent(EventKind.HALF_OPENED, name, now, "probes_lost")
        return Decision(Admission.PROBE, transition=_half_open(current, now), events=(event,))
    event = BreakerEvent(EventKind.PROBE_REJECTED, name, now)
    return Decision(Admission.REJECT, SkipReason.PROBE_REJECTED, events=(event,))


def on_outcome(
    name: str,
    current: BreakerState,
    stats: WindowStats | None,
    outcome: Outcome,
    policy: PolicyConfig,
    now: float,
    *,
    was_probe: bool,
) -> tuple[BreakerState | None, tuple[BreakerEvent, ...]]:
    """The transition a finished call causes, if any. `current` already counts the call
    (consecutive failures, probe successes); `stats` are the windows including it."""
    if current.mode != Mode.AUTO or current.state == State.OPEN:
        return None, ()  # an operator decides, or a call admitted before it opened reports late
    if current.state == State.HALF_OPEN and not was_probe:
        return None, ()
    if outcome.cool_down:
        wait = outcome.retry_after_s if outcome.retry_after_s is not None else policy.cooldown_s
        return _open(name, current, now, "rate_limited", policy, wait_s=wait, count_reopen=False)
    if outcome.opens_breaker:
        return _open(name, current, now, outcome.error_class or "auth", policy)
    if current.state == State.HALF_OPEN:
        if outcome.breaker_failure:
            return _open(name, current, now, "probe_failed", policy)
        if current.probes_succeeded >= policy.half_open_probes:
            closed = replace(
                current,
                state=State.CLOSED,
                version=current.version + 1,
                consecutive_failures=0,
                reopens=0,
                probes_admitted=0,
                probes_succeeded=0,
                open_until=0.0,
                closed_at=now,
            )
            return closed, (BreakerEvent(EventKind.CLOSED, name, now, current.reason),)
        return None, ()
    if current.state != State.CLOSED:
        return None, ()
    reason = _trip_reason(current, stats, outcome, policy)
    return _open(name, current, now, reason, policy) if reason else (None, ())


def _trip_reason(
    current: BreakerState, stats: WindowStats | None, outcome: Outcome, policy: PolicyConfig
) -> str:
    if outcome.breaker_failure and current.consecutive_failures >= policy.consecutive_failures:
        return "stuck_calls" if outcome.error_class == STUCK else "consecutive_failures"
    if stats is None:
        return ""
    if stats.calls >= policy.failure_min_calls:
        if stats.failures * 100 >= policy.failure_rate_pct * stats.calls and stats.failures:
            return "failure_rate"
        if stats.slow * 100 >= policy.slow_call_rate_pct * stats.calls and stats.slow:
            return "slow_calls"
    if _p95_over(stats.p95_calls_recent, stats.over_p95_recent, policy) and _p95_over(
        stats.p95_calls - stats.p95_calls_recent, stats.over_p95 - stats.over_p95_recent, policy
    ):
        return "p95_latency"
    return ""


def _p95_over(calls: int, over: int, policy: PolicyConfig) -> bool:
    """A p95 over the limit (more than 5 % of the calls over it) in one half of the p95
    window, on at least the minimum of calls. The rule asks it of both halves: a latency held
    for two minutes running, not one slow call among ten."""
    return calls >= policy.failure_min_calls and over > P95_SHARE * calls


def needs_window(outcome: Outcome, policy: PolicyConfig) -> bool:
    """Only a failure or a slow call can trip a rate: a fast success never needs the sums."""
    return (
        outcome.breaker_failure
        or is_slow(outcome.latency_s, policy)
        or is_over_p95(outcome.latency_s, policy)
    )


def _open(
    name: str,
    current: BreakerState,
    now: float,
    reason: str,
    policy: PolicyConfig,
    *,
    wait_s: float | None = None,
    count_reopen: bool = True,
) -> tuple[BreakerState, tuple[BreakerEvent, ...]]:
    """OPEN for the backoff cooldown (or `wait_s`, a Retry-After, which doesn't grow it)."""
    cooldown = cooldown_for(current.reopens, policy) if wait_s is None else wait_s
    opened = replace(
        current,
        state=State.OPEN,
        version=current.version + 1,
        consecutive_failures=0,
        opened_at=now,
        open_until=now + cooldown,
        reopens=current.reopens + 1 if count_reopen else current.reopens,
        probes_admitted=0,
        probes_succeeded=0,
        reason=reason,
    )
    return opened, (BreakerEvent(EventKind.OPENED, name, now, reason, cooldown),)


TRICKLE_ANSWERED = "trickle_answered"


def trickle_answered(
    name: str, current: BreakerState, now: float
) -> tuple[BreakerState, tuple[BreakerEvent, ...]] | None:
    """A call let through while every breaker was open answered: an open breaker (in the
    automatic mode) half-opens at once rather than at the end of its cooldown. None: it isn't
    open (any more), or an operator holds it."""
    if current.mode != Mode.AUTO or current.state != State.OPEN:
        return None
    event = BreakerEvent(EventKind.HALF_OPENED, name, now, TRICKLE_ANSWERED)
    return _half_open(current, now), (event,)


def _half_open(current: BreakerState, now: float) -> BreakerState:
    return replace(
        current,
        state=State.HALF_OPEN,
        version=current.version + 1,
        half_opened_at=now,
        probes_admitted=0,
        probes_succeeded=0,
    )


def _probe_stale_after(policy: PolicyConfig) -> float:
    return 2 * policy.request_deadline_s
