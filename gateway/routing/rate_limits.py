"""A caller's requests and tokens per minute, checked before its request is routed and counted
with the request's own bookkeeping.

Far from a limit, a request is admitted on what this process last heard of the subject's
counters (a record's reply, at most `Readings.max_age_s` old) plus the requests it has admitted
since, and it is counted by the record of its call, as spend increments of the window's keys:
no round trip of its own. Within `margin` of the limit, or with nothing fresh heard, it is
checked and counted in one atomic store call (`StateStore.rate_take`), so the last requests
before a limit are exact across processes. What another process admits on its own readings is
seen with their next reply: across processes a limit can be passed by what they admitted in
the last `max_age_s` outside the margin, never inside it. With an in-process store every check
is exact (nothing is ever heard ahead: `max_age_s` is 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engine.rate import BUCKET_TTL_S, Limits, RateKeys, Verdict, judge, rate_keys
from gateway.routing.ports import Ports
from gateway.state.contract import SpendIncrement


@dataclass(slots=True)
class RateTicket:
    """An admitted request's place in its subject's window."""

    subject: str
    keys: RateKeys
    counted: bool  # in the shared counters, or in a record on its way there
    pending: bool = False  # admitted on what was heard: in `Readings.pending` until recorded


def margin(limits: Limits) -> int:
    """How many requests before the limit every check is exact."""
    return max(1, limits.requests_per_minute // 10)


async def rate_admit(ports: Ports, subject: str, limits: Limits) -> RateTicket | Verdict:
    """A ticket for one more request of `subject`, or the refusal with its Retry-After."""
    keys = rate_keys(subject, ports.clock.wall())
    readings = ports.readings
    heard = readings.values(keys.all, ports.clock.mono())
    if heard is not None:
        pending = readings.pending(subject)
        if judge(limits, heard, keys, extra_requests=pending + margin(limits)).admitted:
            readings.pending_move(subject, 1)
            return RateTicket(subject, keys, counted=False, pending=True)
    # This process's admissions on readings count too: they are in no counter yet.
    pending = readings.pending(subject)
    counted, counts = await ports.store.rate_take(keys, limits, ttl_s=BUCKET_TTL_S, pending=pending)
    readings.note(None, None, counts, ports.clock.mono())
    if counted:
        return RateTicket(subject, keys, counted=True)
    verdict = judge(limits, counts, keys, extra_requests=pending)
    return verdict if not verdict.admitted else Verdict(False, "requests", 1)


def rate_increments(
    ticket: RateTicket | None, tokens: int
) -> tuple[tuple[SpendIncrement, ...], tuple[str, ...]]:
    """What a record adds to the window (the request, unless counted already, and its tokens)
    and the keys it reads back for the next admission. The request is counted by the first
    record that carries it (of a hedged race's two, whichever settles first)."""
    if ticket is None:
        return (), ()
    increments = []
    if not ticket.counted:
        ticket.counted = True
        increments.append(SpendIncrement(ticket.keys.requests_now, 1.0, BUCKET_TTL_S))
    if tokens:
        increments.append(SpendIncrement(ticket.keys.tokens_now, float(tokens), BUCKET_TTL_S))
    return tuple(increments), ticket.keys.all


def rate_recorded(ports: Ports, ticket: RateTicket | None) -> None:
    """A record carrying the request's count has been answered: its reply shows it now."""
    if ticket is not None and ticket.pending and ticket.counted:
        ticket.pending = False
        ports.readings.pending_move(ticket.subject, -1)


async def rate_settle(ports: Ports, ticket: RateTicket | None) -> None:
    """A request that ended with no call recorded (refused, static, cached): count it now."""
    if ticket is None or ticket.counted:
        return
    ticket.counted = True
    _, counts = await ports.store.rate_take(ticket.keys, Limits(), ttl_s=BUCKET_TTL_S, check=False)
    ports.readings.note(None, None, counts, ports.clock.mono())
    rate_recorded(ports, ticket)


def rate_abandon(ports: Ports, ticket: RateTicket | None) -> None:
    """A request whose walk failed before any record (the platform's own error, a cancelled
    request): it stops counting as pending here. It is not counted in the window either: a
    request the gateway couldn't route is not the caller's to pay for."""
    if ticket is not None and ticket.pending:
        ticket.pending = False
        ports.readings.pending_move(ticket.subject, -1)
