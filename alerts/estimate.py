"""When a provider that is out should be back, as a pure rule (the clock passed in): what the
static-tier alert says, and how it came to say it.

A provider out of service comes back, at the earliest, when its breaker's next probe succeeds
(the cooldown's end: a request's probe, or the sentinel's with no traffic). How long its past
incidents lasted says how much later that is likely to be: the median of its last closed ones,
minus how long this one has lasted already, never before the next probe. With no history the
next probe is all there is to go on, and the alert says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Outage:
    """A provider whose breaker is out: when its next probe may run (its cooldown's end; a
    time already past, or 0, for a breaker half-open or due) and when this outage began."""

    provider: str
    next_probe_at: float
    started_at: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """`provider` should be back in `in_s` seconds; `basis` says how that was worked out."""

    provider: str
    in_s: float
    basis: str

    @property
    def headline(self) -> str:
        return f"Recovery estimated: {spoken_roughly(self.in_s)}"


def recovery_estimate(outage: Outage, past_s: Sequence[float], *, now: float) -> Estimate:
    """The estimate for one provider from the lengths of its past incidents (newest first)."""
    probe_in = max(0.0, outage.next_probe_at - now)
    probe = f"next probe in {spoken(probe_in)}" if probe_in >= 1 else "a probe is due now"
    if not past_s:
        at_probe = f"in {spoken(probe_in)}" if probe_in >= 1 else "now"
        return Estimate(
            outage.provider,
            probe_in,
            f"no past incidents: at the earliest at the next probe, {at_probe}",
        )
    median = statistics.median(past_s)
    lasted = max(0.0, now - outage.started_at)
    in_s = max(median - lasted, probe_in)
    count = len(past_s)
    which = "its last incident" if count == 1 else f"its last {count} incidents"
    basis = f"{probe}; {which} lasted {span(min(past_s), max(past_s))}, median {spoken(median)}"
    if lasted >= 1:
        basis += f"; this one has lasted {spoken(lasted)}"
    if median - lasted < probe_in:
        basis += ", so not before the next probe"
    return Estimate(outage.provider, in_s, basis)


def earliest(estimates: Iterable[Estimate]) -> Estimate | None:
    """The first provider expected back: the end of the static tier."""
    return min(estimates, key=lambda estimate: estimate.in_s, default=None)


def spoken(seconds: float) -> str:
    """A duration as an operator reads it: 40 s, 8 min, 2 h 5 min."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s"
    minutes = int(seconds / 60 + 0.5)
    if minutes < 120:
        return f"{minutes} min"
    return _hours(minutes)


def _hours(minutes: int) -> str:
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def spoken_roughly(seconds: float) -> str:
    """The headline's figure: whole minutes from a minute on ("8 minutes")."""
    if seconds < 1:
        return "any moment (a probe is due now)"
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes = int(seconds / 60 + 0.5)
    if minutes < 120:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return _hours(minutes)


def span(low: float, high: float) -> str:
    """A range of durations in one unit: 6–12 min, 40–75 s, or one figure when they agree."""
    if high < 90:
        low_text, high_text, unit = str(round(low)), str(round(high)), "s"
    else:
        low_text, high_text, unit = str(int(low / 60 + 0.5)), str(int(high / 60 + 0.5)), "min"
    if low_text == high_text:
        return f"{high_text} {unit}"
    return f"{low_text}–{high_text} {unit}"
