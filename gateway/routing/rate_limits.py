"""A caller's requests and tokens per minute: each request admitted by one atomic decision in
the shared store, checked as it arrives, and its tokens counted by the record of its call.

A request is admitted on a slot this process holds for its caller (`gateway.routing.rate_slots`:
a request the record of an earlier call counted ahead, atomically, while the window was far
from the limit), with no round trip; or else by an atomic check-and-count in the store
(`StateStore.rate_take`, `rate.judge`'s rule), a round trip of its own. Either way the request
is in the window before it is routed, in every process's view, so no process admits past a
limit: what each admits is counted, never estimated. Every request of a limited caller counts,
whatever becomes of it (refused for its body, served from a stand-in, ended early).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engine.rate import BUCKET_TTL_S, Limits, Verdict, judge, rate_keys
from gateway.routing.ports import Ports
from gateway.state.contract import SlotTake, SpendIncrement


@dataclass(frozen=True, slots=True)
class RateTicket:
    """An admitted request's place in its subject's window (the request counted already)."""

    subject: str
    limits: Limits


async def rate_admit(ports: Ports, subject: str, limits: Limits) -> RateTicket | Verdict:
    """A ticket for one more request of `subject`, or the refusal with its Retry-After."""
    now = ports.clock.wall()
    if ports.readings.slots.claim(subject, now):
        return RateTicket(subject, limits)
    keys = rate_keys(subject, now)
    counted, counts = await ports.store.rate_take(keys, limits, ttl_s=BUCKET_TTL_S)
    if counted:
        return RateTicket(subject, limits)
    verdict = judge(limits, counts, keys)
    return verdict if not verdict.admitted else Verdict(False, "requests", 1)


def rate_increments(
    ports: Ports, ticket: RateTicket | None, tokens: int
) -> tuple[tuple[SpendIncrement, ...], SlotTake | None]:
    """What a record adds to the caller's window (its tokens, and the slots this process gives
    back) and the slot it asks to count ahead for the caller's next request."""
    slots, now = ports.readings.slots, ports.clock.wall()
    back = slots.take_stale(now)
    if ticket is None:
        return back, None
    keys = rate_keys(ticket.subject, now)
    increments = (SpendIncrement(keys.tokens_now, float(tokens), BUCKET_TTL_S),) if tokens else ()
    return increments + back, slots.offer(ticket.subject, keys, ticket.limits)


def rate_slot_taken(ports: Ports, ticket: RateTicket | None, take: SlotTake | None) -> None:
    """The record counted the slot it asked for: this process holds it for the caller."""
    if ticket is not None and take is not None:
        ports.readings.slots.taken(ticket.subject, take, ports.clock.wall())
