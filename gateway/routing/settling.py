"""A finished call counted: breaker, statistics, spend and the answer cache in one store round
trip (`settle`), then the breaker moved if the call says so (`breaker_move`, by version)."""

from __future__ import annotations

import logging
from dataclasses import replace
from decimal import Decimal

from gateway.adapters.errors import ERROR_TABLE, ErrorClass, ErrorRule, ProviderError
from gateway.adapters.messages import Completion
from gateway.engine import breaker
from gateway.engine.breaker import BreakerState
from gateway.engine.budgets import hold_seconds, usage
from gateway.engine.config import PolicyConfig
from gateway.routing.answer_cache import cache_write
from gateway.routing.ports import Ports
from gateway.routing.rate_limits import rate_increments, rate_slot_taken
from gateway.routing.walk import Attempt, AttemptOutcome, Ticket, Walk
from gateway.state.contract import RecordCall, Sample, SpendIncrement, Windows

logger = logging.getLogger(__name__)


def call_ended(ports: Ports, ticket: Ticket) -> None:
    """The call no longer waits on its provider: its in-flight place is free (once)."""
    if ticket.waiting:
        ticket.waiting = False
        ports.in_flight.give(ticket.provider.name)
        if ticket.trickle:
            ports.trickle.give()


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
    rule = rule_of(error, policy, loading=ticket.loading) if error is not None else None
    # The time it spent loading its model first (Ollama's load_duration) is not the provider
    # being slow: judged, and kept for its stuck threshold, without it.
    load_s = completion.load_s if completion is not None and error is None else 0.0
    latency_s, loaded_s = max(0.0, latency_s - load_s), latency_s
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
    rate_spend, slot = rate_increments(
        ports,
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
        RecordCall(
            name,
            Sample(
                ok=error is None or (rule is not None and not rule.breaker_failure),
                failure=outcome.breaker_failure,
                # The error table says which failures also count as slow calls (a timeout does).
                slow=breaker.is_slow(latency_s, policy) or (rule is not None and rule.slow_call),
                over_p95=breaker.is_over_p95(latency_s, policy),
                latency_ms=latency_s * 1000,
                counted=not ticket.counted,
            ),
            now=now,
            windows=windows(policy),
            want_stats=breaker.needs_window(outcome, policy),
            probe_version=state.version if ticket.was_probe else None,
            spend=spend + rate_spend,
            cache=saved,
            read_spend=tuple(key for key, _ in ticket.keys.values()),
            release=ticket.release,
            standing=standing,
            slot=slot,
        )
    )
    if recorded.slot_taken:
        rate_slot_taken(ports, walk.request.rate, slot)
    if standing is not None and recorded.standing_taken:
        ports.readings.standing.taken(name, standing, now)
    current, stats = recorded.state, recorded.stats
    ports.readings.note(name, current, recorded.spent, ports.clock.mono())
    ports.stuck.heard(name, current)
    if error is None and not walk.request.stream:
        ports.stuck.note(name, "answer", latency_s)
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
    if ticket.trickle and error is None:
        walk.events.extend(await trickle_answered(ports, name, current, now))

    latency_ms = round(loaded_s * 1000)
    if error is None:
        note = ticket.adapter.call_note(ticket.request)
        attempt = Attempt(
            name,
            AttemptOutcome.OK,
            latency_ms=latency_ms,
            detail=note,
            model=provider.model,
            cost=cost,
            dropped=ticket.adapter.dropped(ticket.request),
        )
        return attempt, cost
    attempt = Attempt(
        name,
        AttemptOutcome.ERROR,
        error.error_class.value,
        latency_ms=latency_ms,
        status=error.status,
        detail=error.message[:200],
        model=provider.model,
        cost=cost,
        dropped=ticket.adapter.dropped(ticket.request),
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
    ports.stuck.heard(name, new_state)
    for event in new_events:
        logger.warning("breaker %s %s (%s)", event.provider, event.kind.value, event.reason or "-")
    return new_events


def rule_of(error: ProviderError, policy: PolicyConfig, *, loading: bool = False) -> ErrorRule:
    """The error table's rule for a failed call, as the policy reads it: a non-compliant answer
    counts against the breaker only when the policy says so, and a call that timed out while
    its model was loading counts against nothing."""
    rule = ERROR_TABLE[error.error_class]
    if error.error_class == ErrorClass.NON_COMPLIANT and policy.non_compliant_is_failure:
        return replace(rule, breaker_failure=True)
    if loading and error.error_class == ErrorClass.TIMEOUT:
        return replace(rule, breaker_failure=False, slow_call=False)
    return rule


async def trickle_answered(
    ports: Ports, name: str, current: BreakerState, now: float
) -> tuple[breaker.BreakerEvent, ...]:
    """A trickle call (`routing/trickle.py`) answered while its breaker was open: the cooldown
    ends now, so the next requests carry the half-open probes that close it."""
    moved = breaker.trickle_answered(name, current, now)
    if moved is None:
        return ()
    state, events = moved
    ports.readings.forget(name)
    if not await ports.store.transition(name, current.version, state):
        return ()
    ports.stuck.heard(name, state)
    logger.warning("breaker %s half-opened early: the trickle call answered", name)
    return events


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
