"""One attempt at one provider: admission (health, breaker, budgets, probe slot), the call
(whole, or streamed up to its first token; cancellable when a hedged race is lost) and the
settling (breaker, statistics, spend and the answer cache, in one store round trip)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from decimal import Decimal
from typing import Any

from providers.adapters.errors import ERROR_TABLE, ErrorClass, ErrorRule, ProviderError
from providers.adapters.messages import Completion
from providers.adapters.scrub import scrub, scrubbed_traceback
from providers.adapters.stream import CompletionStream
from providers.engine import breaker
from providers.engine.breaker import Admission, BreakerState
from providers.engine.budgets import (
    answer_tokens_reserved,
    budget_gate,
    hold_seconds,
    usage,
)
from providers.engine.config import PolicyConfig, ProviderConfig
from providers.engine.health import health_skip
from providers.routing.answer_cache import cache_write
from providers.routing.budget_holds import hold, later, release_later, reservation
from providers.routing.ports import Ports
from providers.routing.rate_limits import rate_increments, rate_recorded
from providers.routing.walk import MIN_ATTEMPT_S, Attempt, AttemptResult, Ticket, Walk
from providers.state.contract import Sample, SpendIncrement, Windows, spend_key

logger = logging.getLogger(__name__)


async def admit(walk: Walk, provider: ProviderConfig) -> Ticket | AttemptResult:
    """The breaker's and the budgets' say before a call: a ticket, or why it is skipped."""
    request, policy, ports = walk.request, walk.policy, walk.ports
    store, name = ports.store, provider.name
    adapter = ports.adapters.get(provider)
    if adapter is None:
        return AttemptResult(Attempt(name, "skipped", "unsupported_kind"))
    if provider.api_key_env and not provider.api_key:
        # Its key variable isn't set in this process: a call could only be refused.
        return AttemptResult(Attempt(name, "skipped", "api_key_missing"))
    budgets = [b for b in walk.snapshot.budgets if b.applies_to(provider, request.client)]
    now = ports.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now, walk.policy.time_zone) for b in budgets}
    spend_keys = [key for key, _ in keys.values()]
    # In steady state the previous call's reply answers this (one round trip a request).
    heard = ports.readings.lookup(name, spend_keys, ports.clock.mono())
    if heard is None:
        state, spent = await store.read(name, spend_keys)
        ports.readings.note(name, state, spent, ports.clock.mono())
    else:
        state, spent = heard
    unhealthy = health_gate(walk, state)
    if unhealthy:
        return AttemptResult(Attempt(name, "skipped", unhealthy))

    decision = breaker.admit(name, state, policy, now)
    if decision.transition is not None:
        ports.readings.forget(name)  # moved here or by another process: read it afresh
        if await store.transition(name, state.version, decision.transition):
            walk.events.extend(decision.events)
            state = decision.transition
        else:  # another process moved the breaker first: decide again on what it did
            state, _ = await store.read(name)
            decision = breaker.admit(name, state, policy, now)
            if decision.transition is not None:
                return AttemptResult(Attempt(name, "skipped", "probe_rejected"))
    if decision.admission == Admission.REJECT:
        walk.events.extend(decision.events)
        return AttemptResult(Attempt(name, "skipped", decision.reason))

    holds = reservation(request.completion, provider, budgets, keys, request.priority)
    budget_skip = budget_gate(spent, holds)
    if budget_skip:
        return AttemptResult(Attempt(name, "skipped", budget_skip))
    # Not one more call behind those already waiting on it (it may be stuck): the next one.
    if not ports.in_flight.take(name, provider.max_in_flight):
        return AttemptResult(Attempt(name, "skipped", "in_flight_limit"))

    time_left = walk.deadline - ports.clock.mono()
    if time_left < MIN_ATTEMPT_S:  # the bookkeeping took the time
        ports.in_flight.give(name)
        return AttemptResult(Attempt(name, "skipped", "deadline_exceeded"))
    was_probe = decision.admission == Admission.PROBE
    if was_probe and not await store.acquire_probe(
        name, state.version, policy.half_open_probes, ports.clock.wall()
    ):
        ports.in_flight.give(name)
        walk.events.append(
            breaker.BreakerEvent(breaker.EventKind.PROBE_REJECTED, name, ports.clock.wall())
        )
        return AttemptResult(Attempt(name, "skipped", "probe_rejected"))
    completion, release = request.completion, None
    if holds:
        held = await hold(walk, provider, holds, time_left)
        if isinstance(held, str):
            ports.in_flight.give(name)
            if was_probe:  # it will never report: its slot goes to the next call
                await store.release_probe(name, state.version)
            return AttemptResult(Attempt(name, "skipped", held))
        release = held
        if completion.max_tokens is None:  # so the reservation really is the worst case
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
    )


def call_ended(ports: Ports, ticket: Ticket) -> None:
    """The call no longer waits on its provider: its in-flight place is free (once)."""
    if ticket.waiting:
        ticket.waiting = False
        ports.in_flight.give(ticket.provider.name)


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


async def attempt(
    walk: Walk, provider: ProviderConfig, cancel: asyncio.Event | None = None
) -> AttemptResult:
    admitted = await admit(walk, provider)
    if isinstance(admitted, AttemptResult):
        return admitted
    ticket, ports, name = admitted, walk.ports, provider.name
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
        else:
            call = adapter.complete(request, timeout=timeout)
        value = await (call if cancel is None else unless_cancelled(call, cancel))
        if isinstance(value, CompletionStream):
            stream = value
        else:
            completion = value
    except Cancelled:
        if ticket.was_probe:  # it will never report: its slot goes to the next call
            await ports.store.release_probe(name, ticket.state.version)
        if ticket.release is not None:
            await ports.store.release(ticket.release.holder, ticket.release.keys)
        latency_ms = round((ports.clock.mono() - ticket.started) * 1000)
        return AttemptResult(
            Attempt(name, "cancelled", latency_ms=latency_ms, model=provider.model)
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
            scrubbed_traceback(exc, (provider.api_key,)),
        )
        detail = scrub(f"unexpected {type(exc).__name__}: {exc}", (provider.api_key,))
        error = ProviderError(ErrorClass.MALFORMED, detail[:500])
    finally:
        # A stream stops waiting at its first token: a provider that answers isn't stuck, and
        # a stream its client never reads on must not keep the place.
        call_ended(ports, ticket)
    latency_s = ports.clock.mono() - ticket.started

    if stream is not None:  # settled when it ends (finish_stream)
        attempt = Attempt(name, "ok", latency_ms=round(latency_s * 1000), model=provider.model)
        return AttemptResult(attempt, stream=stream, ticket=ticket)
    attempt, cost = await settle(walk, ticket, completion, error, latency_s, cache=True)
    return AttemptResult(attempt, completion, error=error, cost=cost)


async def settle(
    walk: Walk,
    ticket: Ticket,
    completion: Completion | None,
    error: ProviderError | None,
    latency_s: float,
    *,
    cache: bool,
) -> tuple[Attempt, Decimal]:
    """Count a finished call: breaker, statistics, spend and (for a good answer) the cache, in
    one store round trip; then move the breaker if the call says so."""
    policy, ports = walk.policy, walk.ports
    call_ended(ports, ticket)
    store, provider = ports.store, ticket.provider
    name = provider.name
    rule = ERROR_TABLE[error.error_class] if error is not None else None
    outcome = breaker_outcome(error, rule, latency_s)
    cost = Decimal("0")
    spend: tuple[SpendIncrement, ...] = ()
    if completion is not None:  # what was used, even of an answer that broke off
        cost = provider.cost(completion.tokens_in, completion.tokens_out)
        tokens = completion.tokens_in + completion.tokens_out
        spend = tuple(
            SpendIncrement(key, amount, ttl)
            for key, ttl, amount in (
                (*ticket.keys[b.id], usage(b, cost, tokens)) for b in ticket.budgets
            )
            if amount > 0
        )
    rate_spend, rate_read = rate_increments(
        walk.request.rate,
        completion.tokens_in + completion.tokens_out if completion is not None else 0,
    )
    now = ports.clock.wall()
    saved = None
    if cache and error is None and completion is not None and walk.cache_key:
        saved = cache_write(walk.cache_key, completion.text, name, now, walk.policy.cache_ttl_s)
    state = ticket.state
    standing = None
    if ticket.holds and not walk.request.stream:
        life_s = 2 * hold_seconds(
            provider, provider.timeout_s, stream=False, grace_s=policy.request_deadline_s
        )
        standing = ports.readings.standing.offer(name, ticket.holds, life_s)
    recorded = await store.record(
        name,
        Sample(
            ok=error is None or (rule is not None and not rule.breaker_failure),
            failure=outcome.breaker_failure,
            # The error table says which failures also count as slow calls (a timeout does).
            slow=breaker.is_slow(latency_s, policy) or (rule is not None and rule.slow_call),
            over_p95=breaker.is_over_p95(latency_s, policy),
            latency_ms=latency_s * 1000,
        ),
        now=now,
        windows=windows(policy),
        want_stats=breaker.needs_window(outcome, policy),
        probe_version=state.version if ticket.was_probe else None,
        spend=spend + rate_spend,
        cache=saved,
        read_spend=[*(key for key, _ in ticket.keys.values()), *rate_read],
        release=ticket.release,
        standing=standing,
    )
    if standing is not None and recorded.standing_taken:
        ports.readings.standing.taken(name, standing, now)
    current, stats = recorded.state, recorded.stats
    ports.readings.note(name, current, recorded.spent, ports.clock.mono())
    rate_recorded(ports, walk.request.rate)
    walk.events.extend(
        await breaker_move(
            ports,
            policy,
            name,
            current,
            stats,
            outcome,
            now,
            was_probe=ticket.was_probe and current.version == state.version,
        )
    )

    latency_ms = round(latency_s * 1000)
    if error is None:
        return Attempt(name, "ok", latency_ms=latency_ms, model=provider.model, cost=cost), cost
    attempt = Attempt(
        name,
        "error",
        error.error_class.value,
        latency_ms=latency_ms,
        status=error.status,
        detail=error.message[:200],
        model=provider.model,
        cost=cost,
    )
    return attempt, cost


async def breaker_move(
    ports: Ports,
    policy: PolicyConfig,
    name: str,
    current: BreakerState,
    stats: breaker.WindowStats | None,
    outcome: breaker.Outcome,
    now: float,
    *,
    was_probe: bool,
) -> tuple[breaker.BreakerEvent, ...]:
    """Move the breaker if a recorded call says so (`current` already counts it): by
    version, so a process that moved it first wins. The events, if this one moved it."""
    new_state, new_events = breaker.on_outcome(
        name, current, stats, outcome, policy, now, was_probe=was_probe
    )
    if new_state is None:
        return ()
    ports.readings.forget(name)
    if not await ports.store.transition(name, current.version, new_state):
        return ()
    for event in new_events:
        logger.warning("breaker %s %s (%s)", event.provider, event.kind.value, event.reason or "-")
    return new_events


def breaker_outcome(
    error: ProviderError | None, rule: ErrorRule | None, latency_s: float
) -> breaker.Outcome:
    if error is None or rule is None:
        return breaker.Outcome(ok=True, latency_s=latency_s)
    return breaker.Outcome(
        ok=False,
        latency_s=latency_s,
        breaker_failure=rule.breaker_failure,
        opens_breaker=rule.opens_breaker,
        cool_down=rule.cool_down,
        retry_after_s=error.retry_after_s,
        error_class=error.error_class.value,
    )


def windows(policy: PolicyConfig) -> Windows:
    return Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)
