"""What the drill's report is built from (`Inputs`: the samples, the breakers' readings, the
ledger) and the measures taken of it: pure arithmetic, times in seconds from the run's start
(the report itself: report.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from devtools.drill.load import Reading, Sample
from devtools.drill.scenarios import Expect

SLOW_WAIT_S = 2.0


NEXT_TIER_SHARE = 0.99


# The share is read over what came back from then until the fault cleared: at least this many
# answers, so a lone late answer doesn't count as traffic having moved.
NEXT_TIER_MIN_ANSWERS = 5


OPEN_STATES = ("open",)


# Once a breaker has opened through one process, the others stop calling it within this.
STOPPED_WITHIN_S = 1.0


# The opening is known this late at most (a status reading every 0.25 s): its cooldown's end is
# taken this early, so that a legitimate probe after the cooldown is never counted.
OPENING_UNCERTAINTY_S = 0.25


BREAKER_OPEN = "breaker_open"


REAL_TIERS = ("primary", "secondary")


@dataclass(frozen=True)
class Ledger:
    """What the ledger held for the run: rows matched by the requests' ids, the rows of the
    drill's client since the start (None when not read), how long the wait for them took."""

    matched: int
    client_rows: int | None
    waited_s: float
    ids_missing: int = 0  # requests that came back without a request id to match
    # The matched rows by "tier: reason", and their attempts by "provider: outcome".
    reasons: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LedgerCall:
    """An attempt in a ledger row of the run's requests: when its request started and ended (s
    from the start of the run), the provider, how it ended ("ok", "error", "cancelled",
    "skipped") and why (the skip's reason, the error's class)."""

    started_at: float
    done_at: float
    provider: str
    outcome: str
    reason: str = ""


@dataclass(frozen=True)
class Inputs:
    samples: Sequence[Sample]
    readings: Sequence[Reading]
    faulted_provider: str | None  # whose breaker is watched (None: no provider is faulted)
    faulted_tier: str | None  # whose return is the recovery ("primary"), None: none
    next_tiers: tuple[str, ...] | None
    fault_at: float | None
    clear_at: float | None  # when the (last) fault cleared; None: it lasted to the end
    ledger: Ledger | None
    alerts: Sequence[dict[str, Any]] = ()
    skipped: int = 0
    expect: Expect = field(default_factory=Expect)
    # A flapping fault's first clear: the move to the next tier is read within its first "down".
    first_clear_at: float | None = None
    # The ledger's attempts that were made or skipped as breaker_open, and the policy's cooldown.
    calls: Sequence[LedgerCall] = ()
    cooldown_s: float | None = None
    # The faulted provider's timeout (s; None: not known): a request that took this long waited
    # it out.
    faulted_timeout_s: float | None = None


def per_second(samples: Sequence[Sample]) -> list[dict[str, int]]:
    """Per second of the run (by when each request was sent): how many each tier served, and
    the client errors."""
    if not samples:
        return []
    seconds = [Counter[str]() for _ in range(int(max(s.sent_at for s in samples)) + 1)]
    for sample in samples:
        seconds[int(sample.sent_at)][sample.tier if sample.ok else "error"] += 1
    return [dict(counter) for counter in seconds]


def fault_to_next_tier(inputs: Inputs) -> float | None:
    """From the fault to the first answer from the next tier after which, until the fault
    (first) cleared, at least 99 % of the answers came from the next tier (None: never, or no
    next tier is meant). It starts with a next-tier answer: the few answers to requests in flight
    before the fault, followed by silence while the rest wait out a timeout, are not traffic
    having moved."""
    if inputs.next_tiers is None or inputs.fault_at is None:
        return None
    clear = inputs.first_clear_at if inputs.first_clear_at is not None else inputs.clear_at
    end = math.inf if clear is None else clear
    window = sorted(
        (s for s in inputs.samples if inputs.fault_at <= s.done_at < end),
        key=lambda s: s.done_at,
    )
    on_next = [s.ok and s.tier in inputs.next_tiers for s in window]
    # Walk back from the end: the earliest start whose suffix is at least 99 % on the next tier.
    found: float | None = None
    good = 0
    for index in range(len(window) - 1, -1, -1):
        good += on_next[index]
        count = len(window) - index
        if on_next[index] and count >= NEXT_TIER_MIN_ANSWERS and good >= NEXT_TIER_SHARE * count:
            found = window[index].done_at
    return since_start(found, inputs.fault_at)


def recovery(inputs: Inputs) -> float | None:
    """From the fault clearing to the first answer from the faulted tier of a request sent
    after it (None: not within the run, or nothing cleared)."""
    if inputs.clear_at is None or inputs.faulted_tier is None:
        return None
    back = [
        s.done_at
        for s in inputs.samples
        if s.ok and s.tier == inputs.faulted_tier and s.sent_at >= inputs.clear_at
    ]
    return since_start(min(back), inputs.clear_at) if back else None


def faulted_first_answer(inputs: Inputs) -> float | None:
    """From the run's start to the faulted tier's first answer to a client (None: none)."""
    if inputs.faulted_tier is None:
        return None
    done = [s.done_at for s in inputs.samples if s.ok and s.tier == inputs.faulted_tier]
    return round(min(done), 2) if done else None


def real_answer_after_clear(inputs: Inputs) -> float | None:
    """From the fault clearing to the first answer a provider gave (primary or secondary, not
    a stand-in) that came back after it (None: none, or nothing cleared)."""
    if inputs.clear_at is None:
        return None
    done = [
        s.done_at
        for s in inputs.samples
        if s.ok and s.tier in REAL_TIERS and s.done_at >= inputs.clear_at
    ]
    return since_start(min(done), inputs.clear_at) if done else None


def breaker_opened_at(inputs: Inputs) -> tuple[float, str] | None:
    """The earliest sign after the fault that the faulted provider's breaker was open, and
    where: a status reading, or the start of a request (any process's) that skipped it as
    breaker_open in the ledger."""
    status = first_state_at(inputs, after=inputs.fault_at, states=OPEN_STATES)
    seen = [] if status is None else [(status, "status")]
    fault_at = math.inf if inputs.fault_at is None else inputs.fault_at
    seen += [
        (call.started_at, "ledger")
        for call in inputs.calls
        if call.provider == inputs.faulted_provider
        and (call.outcome, call.reason) == ("skipped", BREAKER_OPEN)
        and call.started_at >= fault_at
    ]
    return min(seen, default=None)


def late_admissions(inputs: Inputs) -> dict[str, Any] | None:
    """The calls made to the faulted provider by requests that started more than 1 s after its
    breaker (first) opened and before its cooldown ended, and the latest such start after the
    opening (None: the breaker never opened, or the cooldown is not known)."""
    opened = breaker_opened_at(inputs)
    if opened is None or inputs.cooldown_s is None or inputs.faulted_provider is None:
        return None
    at, seen_in = opened
    start, until = at + STOPPED_WITHIN_S, at + inputs.cooldown_s - OPENING_UNCERTAINTY_S
    made = [
        call.started_at
        for call in inputs.calls
        if call.provider == inputs.faulted_provider and call.outcome != "skipped"
    ]
    late = [started - at for started in made if start < started < until]
    latest = round(max(late), 2) if late else None
    # Those within the first second, allowed: how many processes kept calling until they heard.
    first = sum(at <= started <= start for started in made)
    return {"provider": inputs.faulted_provider, "opened_at": round(at, 2),
            "opened_seen_in": seen_in, "from": round(start, 2), "until": round(until, 2),
            "calls": len(late), "latest_after_open_s": latest, "within_1s": first}  # fmt: skip


def full_timeout_waits(inputs: Inputs) -> int | None:
    """The requests sent from the fault on that took at least the faulted provider's timeout:
    they waited it out instead of being moved on."""
    if inputs.faulted_timeout_s is None or inputs.fault_at is None:
        return None
    return sum(
        s.sent_at >= inputs.fault_at and s.latency_s >= inputs.faulted_timeout_s
        for s in inputs.samples
    )


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def first_state_at(inputs: Inputs, *, after: float | None, states: Sequence[str]) -> float | None:
    if after is None or inputs.faulted_provider is None:
        return None
    for reading in inputs.readings:
        if reading.at >= after and reading.breakers.get(inputs.faulted_provider) in states:
            return reading.at
    return None


def since_start(at: float | None, start: float | None) -> float | None:
    return None if at is None or start is None else round(max(0.0, at - start), 2)
