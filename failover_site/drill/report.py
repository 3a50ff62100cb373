"""The drill's report: pure arithmetic over the collected samples (its text: report_text.py).

Times are seconds from the start of the run. "Served by the next tier" is read from when
answers *came back*, not when requests were sent: a request sent just after the fault that
waits out a 15 s timeout and is then answered by the secondary says traffic moved on after
15 s, not at once. The calls admitted after a breaker opened are read from the ledger, which
every serving process writes (the status is one process's view).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from failover_site.drill.load import Reading, Sample
from failover_site.drill.scenarios import Expect

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


@dataclass(frozen=True)
class Report:
    requests: int
    skipped: int
    client_errors: int
    broken_streams: int
    errors_by_kind: dict[str, int]
    tiers: dict[str, int]
    per_second: list[dict[str, int]]
    fault_at: float | None
    clear_at: float | None
    fault_to_open_s: float | None
    breaker_opened: bool
    fault_to_next_tier_s: float | None
    waits_over_2s: int
    answered_within_2s_pct: float
    p95_s: float
    slowest: dict[str, Any] | None
    recovery_s: float | None
    breaker_closed_after_clear_s: float | None
    # The faulted provider's calls admitted > 1 s after its breaker opened (None: not measured).
    late_admissions: dict[str, Any] | None
    # Requests sent from the fault on that took the faulted provider's full timeout or longer
    # (None: its timeout is not known, or nothing is faulted).
    full_timeout_waits: int | None
    alerts: list[dict[str, Any]]
    ledger: dict[str, Any] | None
    ledger_ok: bool | None
    violations: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build(inputs: Inputs) -> Report:
    samples = list(inputs.samples)
    errors = [s for s in samples if not s.ok]
    broken = [s for s in errors if s.broken_stream and s.status == 200]
    opened_at = _first_state_at(inputs, after=inputs.fault_at, states=OPEN_STATES)
    closed_at = _first_state_at(inputs, after=inputs.clear_at, states=("closed",))
    ledger_ok = None
    if inputs.ledger is not None:
        ledger_ok = inputs.ledger.matched == len(samples) and inputs.ledger.client_rows in (
            None,
            len(samples),
        )
    within = sum(s.ok and s.latency_s <= SLOW_WAIT_S for s in samples)
    report = Report(
        requests=len(samples),
        skipped=inputs.skipped,
        client_errors=len(errors),
        broken_streams=len(broken),
        errors_by_kind=dict(Counter(_error_kind(s) for s in errors)),
        tiers=dict(Counter(s.tier or "error" for s in samples if s.ok)),
        per_second=per_second(samples),
        fault_at=inputs.fault_at,
        clear_at=inputs.clear_at,
        fault_to_open_s=_since(opened_at, inputs.fault_at),
        breaker_opened=opened_at is not None,
        fault_to_next_tier_s=fault_to_next_tier(inputs),
        waits_over_2s=sum(s.latency_s > SLOW_WAIT_S for s in samples),
        answered_within_2s_pct=round(100 * within / len(samples), 1) if samples else 0.0,
        p95_s=round(percentile([s.latency_s for s in samples], 95), 3),
        slowest=_slowest(samples),
        recovery_s=recovery(inputs),
        breaker_closed_after_clear_s=_since(closed_at, inputs.clear_at),
        late_admissions=late_admissions(inputs),
        full_timeout_waits=full_timeout_waits(inputs),
        alerts=list(inputs.alerts),
        ledger=asdict(inputs.ledger) if inputs.ledger is not None else None,
        ledger_ok=ledger_ok,
        violations=[],
    )
    report.violations.extend(violations(report, inputs))
    return report


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
    return _since(found, inputs.fault_at)


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
    return _since(min(back), inputs.clear_at) if back else None


def breaker_opened_at(inputs: Inputs) -> tuple[float, str] | None:
    """The earliest sign after the fault that the faulted provider's breaker was open, and
    where: a status reading, or the start of a request (any process's) that skipped it as
    breaker_open in the ledger."""
    status = _first_state_at(inputs, after=inputs.fault_at, states=OPEN_STATES)
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


def violations(report: Report, inputs: Inputs) -> list[str]:
    """The scenario's expectations the run broke (empty: it passed)."""
    expect, found = inputs.expect, []
    errors = report.client_errors - (report.broken_streams if expect.broken_streams_allowed else 0)
    if errors > expect.max_client_errors:
        found.append(f"{errors} client errors (at most {expect.max_client_errors} expected)")
    if expect.breaker_opens is True and inputs.faulted_provider and not report.breaker_opened:
        found.append(f"the breaker of {inputs.faulted_provider} never opened")
    if expect.breaker_opens is False and report.breaker_opened:
        found.append(f"the breaker of {inputs.faulted_provider} opened (a false trip)")
    late = report.late_admissions
    if expect.breaker_opens is True and late is not None and late["calls"]:
        found.append(late_line(report))
    found.extend(_target_violations(report, inputs))
    if expect.ledger_exact and report.ledger_ok is False:
        found.append(f"ledger rows {report.ledger} != {report.requests} requests sent")
    if report.skipped:
        found.append(f"{report.skipped} requests not sent: the bound on requests in flight")
    return found


def _target_violations(report: Report, inputs: Inputs) -> list[str]:
    """The issue's targets the scenario holds the run to (Expect's `min_within_2s_pct`,
    `next_tier_within_s`, `no_full_timeout`)."""
    expect, found = inputs.expect, []
    if expect.min_within_2s_pct is not None and report.answered_within_2s_pct < (
        expect.min_within_2s_pct
    ):
        found.append(
            f"{report.answered_within_2s_pct} % answered within 2 s "
            f"(at least {expect.min_within_2s_pct:g} % expected)"
        )
    measurable = inputs.next_tiers is not None and inputs.fault_at is not None
    if expect.next_tier_within_s is not None and measurable:
        moved = report.fault_to_next_tier_s
        if moved is None or moved > expect.next_tier_within_s:
            when = "never" if moved is None else f"after {moved:.2f} s"
            found.append(
                f"traffic moved to the next tier {when} "
                f"(within {expect.next_tier_within_s:g} s of the fault expected)"
            )
    if expect.no_full_timeout and inputs.faulted_provider and inputs.fault_at is not None:
        waits = report.full_timeout_waits
        if waits is None:
            found.append(f"the timeout of {inputs.faulted_provider} is not known: no request "
                         "may wait it out, and that could not be checked")  # fmt: skip
        elif waits:
            found.append(
                f"{waits} requests waited the full {inputs.faulted_timeout_s:g} s timeout of "
                f"{inputs.faulted_provider} (none expected)"
            )
    return found


def _first_state_at(inputs: Inputs, *, after: float | None, states: Sequence[str]) -> float | None:
    if after is None or inputs.faulted_provider is None:
        return None
    for reading in inputs.readings:
        if reading.at >= after and reading.breakers.get(inputs.faulted_provider) in states:
            return reading.at
    return None


def _since(at: float | None, start: float | None) -> float | None:
    return None if at is None or start is None else round(max(0.0, at - start), 2)


def _error_kind(sample: Sample) -> str:
    if sample.broken_stream:
        return "stream broken mid-answer"
    if sample.status is None:
        return sample.error.split(":", 1)[0] or "transport error"
    if sample.error:
        return sample.error
    return f"HTTP {sample.status}"


def _slowest(samples: Sequence[Sample]) -> dict[str, Any] | None:
    if not samples:
        return None
    worst = max(samples, key=lambda s: s.latency_s)
    return {
        "latency_s": round(worst.latency_s, 3),
        "sent_at": round(worst.sent_at, 2),
        "tier": worst.tier or None,
        "status": worst.status,
        "request_id": worst.request_id or None,
    }


def late_line(r: Report) -> str:
    late = r.late_admissions
    if late is None:
        return "- (the breaker never opened, or its cooldown is not known)"
    latest = late["latest_after_open_s"]
    return (
        f"calls to {late['provider']} admitted > 1 s after its breaker opened: {late['calls']}"
        + (f" (the latest {latest:.2f} s after)" if latest is not None else "")
        + f"; opened {late['opened_at']:.2f} s ({late['opened_seen_in']}), requests started"
        f" {late['from']:.2f}-{late['until']:.2f} s; {late['within_1s']} within 1 s of it"
    )
