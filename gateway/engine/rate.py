"""Requests and tokens per minute, over a sliding window.

Each subject (a client app, or an address for anonymous calls) counts into one bucket per
minute, per kind (requests, tokens). The window's estimate weighs the previous minute by how
much of it still lies within the last 60 s and adds the current minute: the usual two-bucket
approximation of a sliding window, which has no burst at a minute's boundary and costs two
counters per kind. Plain arithmetic here; the counters live in the shared store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW_S = 60
# A bucket outlives the minute after its own, the one that still reads it.
BUCKET_TTL_S = 3 * WINDOW_S


@dataclass(frozen=True, slots=True)
class RateKeys:
    """The four counters one subject's check reads at one moment."""

    requests_prev: str
    requests_now: str
    tokens_prev: str
    tokens_now: str
    weight: float  # the share of the previous minute still inside the window

    @property
    def all(self) -> tuple[str, str, str, str]:
        return (self.requests_prev, self.requests_now, self.tokens_prev, self.tokens_now)


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_minute: int = 0  # 0: no limit
    tokens_per_minute: int = 0

    @property
    def any(self) -> bool:
        return self.requests_per_minute > 0 or self.tokens_per_minute > 0


def rate_keys(subject: str, now: float) -> RateKeys:
    minute, into = divmod(now, WINDOW_S)
    current, previous = int(minute), int(minute) - 1
    return RateKeys(
        requests_prev=f"rate:{subject}:r:{previous}",
        requests_now=f"rate:{subject}:r:{current}",
        tokens_prev=f"rate:{subject}:t:{previous}",
        tokens_now=f"rate:{subject}:t:{current}",
        weight=1.0 - into / WINDOW_S,
    )


def estimate(previous: float, current: float, weight: float) -> float:
    return previous * weight + current


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    kind: str = ""  # what was exhausted: requests / tokens
    retry_after_s: int = 0


def judge(limits: Limits, counts: dict[str, float], keys: RateKeys) -> Verdict:
    """Whether one more request fits, given the counters. A token limit admits while any room
    is left: a request's tokens are known only once it is answered."""
    requests = estimate(
        counts.get(keys.requests_prev, 0.0), counts.get(keys.requests_now, 0.0), keys.weight
    )
    tokens = estimate(
        counts.get(keys.tokens_prev, 0.0), counts.get(keys.tokens_now, 0.0), keys.weight
    )
    if limits.requests_per_minute and requests + 1 > limits.requests_per_minute:
        wait = retry_after(
            counts.get(keys.requests_prev, 0.0),
            counts.get(keys.requests_now, 0.0),
            keys.weight,
            limits.requests_per_minute - 1,
        )
        return Verdict(False, "requests", wait)
    if limits.tokens_per_minute and tokens >= limits.tokens_per_minute:
        wait = retry_after(
            counts.get(keys.tokens_prev, 0.0),
            counts.get(keys.tokens_now, 0.0),
            keys.weight,
            limits.tokens_per_minute * (1 - 1e-9),
        )
        return Verdict(False, "tokens", wait)
    return Verdict(True)


def retry_after(previous: float, current: float, weight: float, room: float) -> int:
    """Whole seconds until the estimate falls to `room`, if nothing more is counted: while the
    previous minute drains out of the window, and if the current minute alone is too much,
    until it has become the previous one and drained far enough in turn."""
    elapsed = (1.0 - weight) * WINDOW_S  # into the current minute
    if current <= room:
        if previous <= 0:
            return 1
        # previous * (1 - (elapsed + t) / 60) + current <= room
        wait = WINDOW_S * (1 - (room - current) / previous) - elapsed
    else:
        # current * (1 - t' / 60) <= room, t' counted from the next minute's start
        wait = (WINDOW_S - elapsed) + WINDOW_S * (1 - room / current)
    return max(1, min(2 * WINDOW_S, math.ceil(wait)))
