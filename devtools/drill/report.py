"""The drill's report: the measures of the collected samples (measures.py), and the
scenario's expectations held against them (its text: report_text.py).

Times are seconds from the start of the run. "Served by the next tier" is read from when
answers *came back*, not when requests were sent: a request sent just after the fault that
waits out a 15 s timeout and is then answered by the secondary says traffic moved on after
15 s, not at once. The calls admitted after a breaker opened are read from the ledger, which
every serving process writes (the status is one process's view).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from devtools.drill.load import Sample
from devtools.drill.measures import (
    OPEN_STATES,
    SLOW_WAIT_S,
    Inputs,
    Ledger,
    LedgerCall,
    breaker_opened_at,
    fault_to_next_tier,
    faulted_first_answer,
    first_state_at,
    full_timeout_waits,
    late_admissions,
    per_second,
    percentile,
    real_answer_after_clear,
    recovery,
    since_start,
)
from devtools.drill.scenarios import Expect

__all__ = [
    "Inputs",
    "Ledger",
    "LedgerCall",
    "Report",
    "breaker_opened_at",
    "build",
    "fault_to_next_tier",
    "full_timeout_waits",
    "late_admissions",
    "per_second",
    "percentile",
    "recovery",
]


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
    # The faulted tier's first answer to a client, from the run's start; a provider's first real
    # answer (primary or secondary) after the fault cleared, from the clearing.
    faulted_first_answer_s: float | None
    real_answer_after_clear_s: float | None
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
    opened_at = first_state_at(inputs, after=inputs.fault_at, states=OPEN_STATES)
    closed_at = first_state_at(inputs, after=inputs.clear_at, states=("closed",))
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
        fault_to_open_s=since_start(opened_at, inputs.fault_at),
        breaker_opened=opened_at is not None,
        fault_to_next_tier_s=fault_to_next_tier(inputs),
        waits_over_2s=sum(s.latency_s > SLOW_WAIT_S for s in samples),
        answered_within_2s_pct=round(100 * within / len(samples), 1) if samples else 0.0,
        p95_s=round(percentile([s.latency_s for s in samples], 95), 3),
        slowest=_slowest(samples),
        recovery_s=recovery(inputs),
        breaker_closed_after_clear_s=since_start(closed_at, inputs.clear_at),
        faulted_first_answer_s=faulted_first_answer(inputs),
        real_answer_after_clear_s=real_answer_after_clear(inputs),
        late_admissions=late_admissions(inputs),
        full_timeout_waits=full_timeout_waits(inputs),
        alerts=list(inputs.alerts),
        ledger=asdict(inputs.ledger) if inputs.ledger is not None else None,
        ledger_ok=ledger_ok,
        violations=[],
    )
    report.violations.extend(violations(report, inputs))
    return report


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
    """The targets the scenario holds the run to (Expect's `min_within_2s_pct`,
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
    if expect.max_waits_over_2s is not None and report.waits_over_2s > expect.max_waits_over_2s:
        found.append(
            f"{report.waits_over_2s} requests waited more than 2 s "
            f"(at most {expect.max_waits_over_2s} expected)"
        )
    found.extend(_answer_violations(report, expect))
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


def _answer_violations(report: Report, expect: Expect) -> list[str]:
    found = []
    within, first = expect.faulted_serves_within_s, report.faulted_first_answer_s
    if within is not None and (first is None or first > within):
        when = "never" if first is None else f"after {first:.2f} s"
        found.append(
            f"the faulted tier answered a client {when} (within {within:g} s of the start expected)"
        )
    within, first = expect.real_answer_within_s, report.real_answer_after_clear_s
    if within is not None and (first is None or first > within):
        when = "never" if first is None else f"{first:.2f} s after the recovery"
        found.append(f"the first real answer came {when} (within {within:g} s of it expected)")
    return found


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
