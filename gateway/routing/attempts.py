"""One attempt at one provider: admission (health, breaker, budgets, probe slot), the call
(whole, or streamed up to its first token; cancellable when a hedged race is lost) and the
settling (breaker, statistics, spend and the answer cache, in one store round trip)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import Completion, CompletionRequest, estimate_tokens
from gateway.adapters.stream import CompletionStream
from gateway.engine import breaker, tracing
from gateway.engine.breaker import STUCK, Admission, BreakerState
from gateway.engine.budgets import (
    answer_tokens_reserved,
    budget_gate,
)
from gateway.engine.config import ProviderConfig
from gateway.engine.health import Health, health_skip
from gateway.engine.reasons import SkipReason
from gateway.engine.scrub import KEPT_LIMIT, scrub_cut, scrubbed_traceback
from gateway.routing.attempt_trace import traced
from gateway.routing.budget_holds import hold, later, release_later, reservation
from gateway.routing.compliance import answer_problem, first_piece_problem
from gateway.routing.hedge import at_bound, detached, hand_over, hedge_bound
from gateway.routing.settling import call_ended, settle
from gateway.routing.stuck import MovedOn, StuckGuard, stall_counter
from gateway.routing.walk import (
    CANNOT_SERVE,
    MIN_ATTEMPT_S,
    Attempt,
    AttemptOutcome,
    AttemptResult,
    Ticket,
    Walk,
)
from gateway.state.contract import spend_key

logger = logging.getLogger(__name__)


async def admit(
    walk: Walk, provider: ProviderConfig, *, trickle: bool = False
) -> Ticket | AttemptResult:
    """The breaker's and the budgets' say before a call: a ticket, or why it is skipped. A
    `trickle` call passes an open breaker (in the automatic mode) and nothing else."""
    request, policy, ports = walk.request, walk.policy, walk.ports
    store, name = ports.store, provider.name
    # An alias's entry is its provider asking for another model: the provider's own adapter.
    own = walk.snapshot.provider(name)
    if own is None or own.model == provider.model:
        own = provider
    adapter = ports.adapters.get(own)
    if adapter is None:
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, SkipReason.UNSUPPORTED_KIND))
    unable = adapter.cannot(request.completion)
    if unable is not None:
        return AttemptResult(
            Attempt(name, AttemptOutcome.SKIPPED, CANNOT_SERVE, detail=": ".join(unable))
        )
    if provider.api_key_env and not provider.api_key:
        # Its key variable isn't set in this process: a call could only be refused.
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, SkipReason.API_KEY_MISSING))
    budgets = [b for b in walk.snapshot.budgets if b.applies_to(provider, request.client)]
    now = ports.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now, walk.policy.time_zone) for b in budgets}
    spend_keys = [key for key, _ in keys.values()]
    # In steady state the previous call's reply answers this (one round trip a request).
    heard = ports.readings.lookup(name, spend_keys, ports.clock.mono())
    if heard is None:
        state, spent = await store.read(name, spend_keys)
        ports.readings.note(name, state, spent, ports.clock.mono())
        ports.stuck.heard(name, state)
    else:
        state, spent = heard
    unhealthy = health_gate(walk, state)
    if unhealthy:
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, unhealthy))

    decision = breaker.admit(name, state, policy, now)
    if (
        trickle
        and decision.admission == Admission.REJECT
        and decision.reason == SkipReason.BREAKER_OPEN
    ):
        decision = breaker.Decision(Admission.ALLOW)
    if decision.transition is not None:
        ports.readings.forget(name)  # moved here or by another process: read it afresh
        if await store.transition(name, state.version, decision.transition):
            walk.events.extend(decision.events)
            state = decision.transition
            ports.stuck.heard(name, state)
        else:  # another process moved the breaker first: decide again on what it did
            state, _ = await store.read(name)
            decision = breaker.admit(name, state, policy, now)
            if decision.transition is not None:
                return AttemptResult(
                    Attempt(name, AttemptOutcome.SKIPPED, SkipReason.PROBE_REJECTED)
                )
    if decision.admission == Admission.REJECT:
        walk.events.extend(decision.events)
        if state.state == breaker.State.OPEN and state.mode == breaker.Mode.AUTO:
            walk.note_open(state.open_until, provider)
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, decision.reason))

    holds = reservation(request.completion, provider, budgets, keys, request.priority)
    budget_skip = budget_gate(spent, holds)
    if budget_skip:
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, budget_skip))
    # Not one more call behind those already waiting on it (it may be stuck): the next one.
    if not ports.in_flight.take(name, provider.max_in_flight):
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, SkipReason.IN_FLIGHT_LIMIT))

    time_left = walk.deadline - ports.clock.mono()
    if time_left < MIN_ATTEMPT_S:  # the bookkeeping took the time
        ports.in_flight.give(name)
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, SkipReason.DEADLINE_EXCEEDED))
    was_probe = decision.admission == Admission.PROBE
    if was_probe and not await store.acquire_probe(
        name, state.version, policy.half_open_probes, ports.clock.wall()
    ):
        ports.in_flight.give(name)
        walk.events.append(
            breaker.BreakerEvent(breaker.EventKind.PROBE_REJECTED, name, ports.clock.wall())
        )
        return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, SkipReason.PROBE_REJECTED))
    completion, release = request.completion, None
    if provider.model != adapter.config.model:  # an alias's entry: the model it names
        completion = replace(completion, model=provider.model)
    if holds:
        held = await hold(walk, provider, holds, time_left)
        if isinstance(held, str):
            ports.in_flight.give(name)
            if was_probe:  # it will never report: its slot goes to the next call
                await store.release_probe(name, state.version)
            return AttemptResult(Attempt(name, AttemptOutcome.SKIPPED, held))
        release = held
        if completion.max_tokens is None and not completion.embed:  # the worst case, held
            completion = replace(completion, max_tokens=answer_tokens_reserved(None))
    return Ticket(
        provider,
        adapter,
        state,
        was_probe,
        budgets,
        keys,
        ports.clock.mono(),
        completion,
        release,
        holds,
        loading=state.health == Health.LOADING,
        trickle=trickle,
    )


def health_gate(walk: Walk, state: BreakerState) -> str:
    """The sentinel's say (read with the breaker): down → skipped, degraded → skipped by high
    priority. An operator's word outranks it: a breaker forced closed, or the kill switch
    forcing this provider, takes calls whatever the checks say (and a disabled breaker is the
    breaker's to reject)."""
    if state.mode != breaker.Mode.AUTO or walk.policy.kill_switch == "force_provider":
        return ""
    return health_skip(state.health, walk.request.priority)


class Cancelled(Exception):
    """The call lost a hedged race and was cancelled."""


async def unless_cancelled(call: Any, cancel: asyncio.Event) -> Any:
    task = asyncio.ensure_future(call)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the request, or a stuck call moved on: the call goes too
        task.cancel()
        task.add_done_callback(_close_unread)
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        value = await task
    except (asyncio.CancelledError, ProviderError):
        raise Cancelled from None
    if isinstance(value, CompletionStream):  # it finished in the same instant
        await value.aclose()
    raise Cancelled


def _close_unread(task: asyncio.Future[Any]) -> None:
    """A call cancelled in the instant it handed over a stream: the stream is closed."""
    if task.cancelled() or task.exception() is not None:
        return
    value = task.result()
    if isinstance(value, CompletionStream):
        later(value.aclose())


async def attempt(
    walk: Walk,
    provider: ProviderConfig,
    cancel: asyncio.Event | None = None,
    *,
    may_hedge: bool = False,
    trickle: bool = False,
) -> AttemptResult:
    """Admit and call one provider. With `may_hedge` (another tier waits behind it), a call
    to a provider without a latency history, or a half-open probe, has the policy's
    first-byte bound: past it the request goes on and the call runs on by itself
    (`routing/hedge.py`). `trickle`: the one call a process lets through while every breaker
    is open (`routing/trickle.py`)."""
    admitted = await admit(walk, provider, trickle=trickle)
    if isinstance(admitted, AttemptResult):
        return admitted
    if not trickle:  # a trickle call's failure leaves its breaker open: no sooner a retry
        walk.called = True
    bound = hedge_bound(walk, admitted, may_hedge=may_hedge or trickle)
    call = _call(walk, admitted, cancel)
    trace = tracing.REQUEST.get()
    if trace is not None:  # the call in a span of its own, in whichever task makes it
        call = traced(trace, admitted, call)
    if bound is None:
        return await call
    return await at_bound(walk, admitted, bound, call)


async def _call(walk: Walk, ticket: Ticket, cancel: asyncio.Event | None) -> AttemptResult:
    """The admitted call and its settling. A call the request went on from (`ticket.hedged`)
    settles by itself: its answer is counted and cached, not used."""
    ports, provider = walk.ports, ticket.provider
    name = provider.name
    adapter = ticket.adapter
    request = ticket.request
    # The time left is measured now, after the bookkeeping, so the call can't overrun it.
    timeout = max(MIN_ATTEMPT_S, min(provider.timeout_s, walk.deadline - ticket.started))
    completion: Completion | None = None
    stream: CompletionStream | None = None
    error: ProviderError | None = None
    try:
        if walk.request.stream:
            # The deadline bounds the wait for the first token; after it, the provider's
            # timeout bounds each pause in the answer, not the answer's length.
            first_token_s = min(walk.policy.first_token_timeout_s, timeout)
            call: Any = adapter.stream(
                request, timeout=provider.timeout_s, first_token_timeout=first_token_s
            )
        elif request.embed:
            call = adapter.embed(request, timeout=timeout)
        else:
            call = adapter.complete(request, timeout=timeout)
        # Still waiting past its provider's usual time: counted stuck, and moved on if the
        # breaker then gives up on the provider (`routing/stuck.py`).
        stuck_s = ports.stuck.threshold(
            name, "first_token" if walk.request.stream else "answer", walk.policy
        )
        guard = StuckGuard(walk, ticket, stuck_s, timeout)
        async with guard:
            value = await (call if cancel is None else unless_cancelled(call, cancel))
        if isinstance(value, CompletionStream):
            stream = value
            ports.stuck.note(name, "first_token", ports.clock.mono() - ticket.started)
            # After the first token, a pause longer than the provider's usual longest is a stall.
            gap_s = ports.stuck.threshold(name, "gap", walk.policy)
            stream.watch_pauses(gap_s, stall_counter(walk, ticket))
        else:
            completion = value
    except MovedOn:
        if ticket.release is not None:
            release_later(ports, ticket.release)
        latency_s = ports.clock.mono() - ticket.started
        # Stuck (counted) and then given up on, or given up on (by others' failures) first.
        kind, detail = (
            (STUCK, f"no answer after {stuck_s:.1f} s; moved on when its breaker opened")
            if guard.stuck
            else ("breaker_opened", f"moved on after {latency_s:.1f} s: its breaker opened")
        )
        attempt = Attempt(
            name,
            AttemptOutcome.CANCELLED,
            kind,
            round(latency_s * 1000),
            detail=detail,
            model=provider.model,
        )
        return AttemptResult(attempt)
    except Cancelled:
        if ticket.was_probe:  # it will never report: its slot goes to the next call
            await ports.store.release_probe(name, ticket.state.version)
        if ticket.release is not None:
            await ports.store.release(ticket.release.holder, ticket.release.keys)
        latency_ms = round((ports.clock.mono() - ticket.started) * 1000)
        return AttemptResult(
            Attempt(name, AttemptOutcome.CANCELLED, latency_ms=latency_ms, model=provider.model)
        )
    except asyncio.CancelledError:
        # The request itself was cancelled (its client went away): the holds and a probe's
        # slot go now, not when they lapse.
        if ticket.release is not None:
            release_later(ports, ticket.release)
        if ticket.was_probe:
            later(ports.store.release_probe(name, ticket.state.version))
        raise
    except ProviderError as exc:
        error = exc
    except Exception as exc:
        # An adapter bug or an answer no rule foresaw: still this provider's failure, never
        # the client's 500. Logged in full (scrubbed: the message may quote the upstream),
        # since it means the error table needs a row.
        logger.error(
            "provider %s failed in an unforeseen way\n%s",
            name,
            scrubbed_traceback(exc, provider.secrets),
        )
        detail = scrub_cut(f"unexpected {type(exc).__name__}: {exc}", KEPT_LIMIT, provider.secrets)
        error = ProviderError(ErrorClass.MALFORMED, detail[:500])
    finally:
        # A stream stops waiting at its first token: a provider that answers isn't stuck, and
        # a stream its client never reads on must not keep the place.
        call_ended(ports, ticket)
    latency_s = ports.clock.mono() - ticket.started
    if ticket.hedged:
        walk = detached(walk)
        result = await _settle(walk, ticket, request, completion, stream, error, latency_s)
        hand_over(walk)
        return result
    return await _settle(walk, ticket, request, completion, stream, error, latency_s)


async def _settle(
    walk: Walk,
    ticket: Ticket,
    request: CompletionRequest,
    completion: Completion | None,
    stream: CompletionStream | None,
    error: ProviderError | None,
    latency_s: float,
) -> AttemptResult:
    name = ticket.provider.name
    whole = True  # the answer as the provider gave it all, to keep in the cache
    if stream is not None and ticket.hedged:
        # Nobody reads it: closed, and counted as the good call it was (its first piece is
        # no answer to keep).
        await stream.aclose()
        completion, stream, whole = stream.completion(latency_s * 1000), None, False
    if stream is not None:
        problem = first_piece_problem(request, stream.first)
        if not problem:  # settled when it ends (finish_stream)
            attempt = Attempt(
                name,
                AttemptOutcome.OK,
                latency_ms=round(latency_s * 1000),
                model=ticket.provider.model,
                dropped=ticket.adapter.dropped(ticket.request),
            )
            return AttemptResult(attempt, stream=stream, ticket=ticket)
        # Nothing of it is relayed: what it used is counted, and the next provider asked.
        await stream.aclose()
        completion = stream.completion(latency_s * 1000, estimate_tokens(request.all_text()))
        error = ProviderError(ErrorClass.NON_COMPLIANT, problem)
    elif completion is not None:
        # An answer that quotes a secret is failed before anything else is asked of it.
        error = ticket.adapter.failures.quoted_secret(completion)
        problem = answer_problem(request, completion) if error is None else ""
        if problem:
            error = ProviderError(ErrorClass.NON_COMPLIANT, problem)
    attempt, cost = await settle(walk, ticket, completion, error, latency_s, cache=whole)
    return AttemptResult(attempt, None if error is not None else completion, error=error, cost=cost)
