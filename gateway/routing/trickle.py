"""Back fast after a total outage: while every provider's breaker is open, a trickle of real
calls finds the first provider that is back, instead of every request waiting out every
cooldown.

A breaker's cooldown grows with each failed round of probes (`cooldown × multiplier^reopens`),
so after a long outage the breakers may stay open for minutes after the upstreams are back, and
every request gets a stand-in meanwhile. Envoy's panic routing answers the same moment by
routing to every host when too few are healthy; here it is bounded:

- a request that found every provider it may use behind an open breaker (none called, at least
  one open, the others passed over for what the request asks) is let through to the provider
  whose cooldown ends first, as it would have asked it;
- one such call at a time per process, at most one started a second (`outage_watch.Trickle`),
  with the first-byte bound (`routing/hedge.py`), so a dead upstream gets a trickle, never a
  pile, and no client waits on it;
- its failure changes nothing (the breaker stays open, its cooldown isn't grown); its answer
  is the client's, and half-opens the breaker at once (`breaker.trickle_answered`), so the next
  requests carry the probes that close it.

Providers disabled by an operator, or that the sentinel reads as down, are not trickled to.
"""

from __future__ import annotations

from gateway.engine.reasons import SkipReason
from gateway.routing.attempts import attempt
from gateway.routing.walk import (
    CANNOT_SERVE,
    TOO_SMALL,
    Attempt,
    AttemptOutcome,
    AttemptResult,
    Walk,
)

BREAKER_OPEN = SkipReason.BREAKER_OPEN
# Skips that say nothing of the provider, only of what this request asks of it.
NOT_FOR_THIS_REQUEST = frozenset({CANNOT_SERVE, TOO_SMALL, SkipReason.CLOUD_NOT_ALLOWED})
TRICKLE_DETAIL = "let through while every breaker is open"


def every_breaker_open(walk: Walk, attempts: list[Attempt]) -> bool:
    """No provider was called, and each one this request may use was behind an open breaker."""
    if walk.called or walk.soonest is None:
        return False
    if any(a.outcome != AttemptOutcome.SKIPPED for a in attempts):
        return False
    reasons = {a.error_class for a in attempts}
    return BREAKER_OPEN in reasons and reasons <= NOT_FOR_THIS_REQUEST | {BREAKER_OPEN}


async def trickle(walk: Walk, attempts: list[Attempt]) -> AttemptResult | None:
    """The trickle call of a request that found every breaker open, when it is this process's
    turn: its answer, or None (not its turn, or no answer)."""
    if not every_breaker_open(walk, attempts):
        return None
    provider, ports = walk.soonest, walk.ports
    assert provider is not None
    if not ports.trickle.take(ports.clock.mono()):
        return None
    result = await attempt(walk, provider, trickle=True)
    if (
        result.attempt.outcome == AttemptOutcome.SKIPPED
    ):  # never called: the turn goes to the next request
        ports.trickle.give()
    detail = result.attempt.detail
    result.attempt.detail = f"{TRICKLE_DETAIL}; {detail}" if detail else TRICKLE_DETAIL
    attempts.append(result.attempt)
    return result if result.answered else None
