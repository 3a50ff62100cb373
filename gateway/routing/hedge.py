"""The first-byte bound: a call that can't yet be judged by its provider's history is not
waited on past the policy's `first_byte_bound_s`.

The stuck rule (`routing/stuck.py`) judges a call by its provider's recent latency in this
process. Without a history (a process just started, a provider that hasn't answered ten times
here yet) its only threshold is the cap, and a client would wait that long on a provider that
hangs from its first request. So such a call, when another tier waits behind it, and every
half-open probe or total-outage trickle call (`routing/trickle.py`), gets the bound instead:

- **Hedge, don't cancel.** Past the bound without a first byte (a whole answer, a stream's
  first token, or a failure), the request goes on to the next tier, and the call runs on by
  itself to its own timeout. The attempt is in the ledger as `hedged` (error class
  `slow_first_byte`), which counts against nothing. What the call brings later is settled
  alone: an answer counts as a good call (and fills the answer cache), a timeout or a stuck
  count as a failure, which is what opens the breaker. Its in-flight place is held until it
  ends, so the provider's `max_in_flight` bounds how many such calls a process keeps.
- **Loading or wedged.** At the bound the process asks the provider whether its model is
  loaded (Ollama's `/api/ps`, at most once per provider every 2 s: `outage_watch.py`). A model the
  server lists as not loaded while it answers is loading: the call is not counted stuck, and
  its timeout counts against nothing. A server that doesn't answer, or lists the model as
  loaded, is wedged, and the call counts as usual. The sentinel tells the same from its own
  checks (`Health.LOADING`), read with the breaker, which every call then takes into account.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from gateway.aio import spawn
from gateway.routing.budget_holds import later
from gateway.routing.walk import Attempt, AttemptOutcome, AttemptResult, Ticket, Walk

logger = logging.getLogger(__name__)

SLOW_FIRST_BYTE = "slow_first_byte"  # the error class of a hedged attempt


def hedge_bound(walk: Walk, ticket: Ticket, *, may_hedge: bool) -> float | None:
    """The first-byte bound of this call, or None for none: a half-open probe or a trickle
    call always has it, any other call only when another tier waits behind it and its
    provider has no latency history in this process yet. Never past the call's own time."""
    if not (ticket.was_probe or ticket.trickle):
        if not may_hedge:
            return None
        kind = "first_token" if walk.request.stream else "answer"
        if walk.ports.stuck.has_history(ticket.provider.name, kind):
            return None  # judged by its history: the stuck rule
    bound = walk.policy.first_byte_bound_s
    time_left = min(ticket.provider.timeout_s, walk.deadline - ticket.started)
    return bound if bound < time_left else None


async def at_bound(
    walk: Walk, ticket: Ticket, bound: float, call: Coroutine[Any, Any, AttemptResult]
) -> AttemptResult:
    """The call's result if its first byte comes within `bound`; else a `hedged` attempt, the
    call left running by itself (settled alone, `ticket.hedged`)."""
    # A task of its own from the start (no request's context in it): it may outlive the request.
    task = spawn(call)
    try:
        await asyncio.wait({task}, timeout=bound)
    except asyncio.CancelledError:  # the request went away first: the call goes with it
        task.cancel()
        raise
    if task.done() or not ticket.waiting:
        # It answered (or failed) in time and is being settled with the request.
        return await task
    ticket.hedged = True
    _running.add(task)
    task.add_done_callback(_ran)
    if not ticket.loading:
        later(_loading_check(walk, ticket))
    why = "a half-open probe" if ticket.was_probe else "no latency history yet"
    if ticket.trickle:
        why = "the one call let through while every breaker is open"
    attempt = Attempt(
        ticket.provider.name,
        AttemptOutcome.HEDGED,
        SLOW_FIRST_BYTE,
        round(bound * 1000),
        detail=f"no first byte within {bound:g} s ({why}): the request went on; the call runs "
        "on to its own timeout",
        model=ticket.provider.model,
    )
    return AttemptResult(attempt)


_running: set[asyncio.Task[AttemptResult]] = set()


def _ran(task: asyncio.Task[AttemptResult]) -> None:
    _running.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("a hedged call failed to settle", exc_info=task.exception())


def detached(walk: Walk) -> Walk:
    """The walk a hedged call settles on: its request's rate window is the request's own
    business (settled when it ended), and the events it finds go to the runtime's incidents
    (`hand_over`), the request being gone."""
    events = [] if walk.ports.note_events is not None else walk.events
    return replace(walk, request=replace(walk.request, rate=None), events=events)


def hand_over(walk: Walk) -> None:
    if walk.events and walk.ports.note_events is not None:
        walk.ports.note_events(list(walk.events))


async def _loading_check(walk: Walk, ticket: Ticket) -> None:
    if await walk.ports.loading.loading(ticket.adapter, walk.ports.clock.mono()):
        ticket.loading = True
        logger.info(
            "%s has not answered within %g s: its model is loading",
            ticket.provider.name,
            walk.policy.first_byte_bound_s,
        )
