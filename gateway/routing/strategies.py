"""How the providers are asked (the policy's strategy): in turn by priority, hedged (a slow
provider gets company from the next one), and the weighted order of same-priority providers."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from dataclasses import replace

from gateway.adapters.errors import ERROR_TABLE
from gateway.adapters.messages import context_needed
from gateway.engine.config import PolicyConfig, ProviderConfig
from gateway.engine.reasons import SkipReason
from gateway.routing.attempts import attempt
from gateway.routing.settling import settle
from gateway.routing.walk import (
    MIN_ATTEMPT_S,
    TOO_SMALL,
    Attempt,
    AttemptOutcome,
    AttemptResult,
    Refused,
    RouteRequest,
    Walk,
)


def ordered(
    providers: Sequence[ProviderConfig], request: RouteRequest, policy: PolicyConfig
) -> Sequence[ProviderConfig]:
    """The providers in the order this request tries them: an alias's entries (`grouped`), or
    the one asked for by name first, then by priority; with the weighted strategy, each
    priority's providers start with one drawn by weight (the same one for the same user) and
    go on by weight."""
    ordered = list(providers)
    if policy.strategy == "weighted":
        ordered = []
        group: list[ProviderConfig] = []
        for provider in (*providers, None):
            if group and (provider is None or provider.priority != group[0].priority):
                ordered += weighted(group, request.sticky_key)
                group = []
            if provider is not None:
                group.append(provider)
    if request.prefer:
        preferred = [p for p in ordered if p.name == request.prefer]
        ordered = preferred + [p for p in ordered if p.name != request.prefer]
    if request.group or not request.then_cascade:
        return grouped(ordered, request)
    return ordered


def grouped(ordered: Sequence[ProviderConfig], request: RouteRequest) -> list[ProviderConfig]:
    """An alias's entries in turn, each its provider asking for the entry's model (admission
    and the breakers stay the provider's), then, with `then_cascade`, the others in order."""
    by_name = {provider.name: provider for provider in ordered}
    entries = [
        replace(by_name[name], model=model) for name, model in request.group if name in by_name
    ]
    if request.then_cascade:
        named = {name for name, _ in request.group}
        entries += [provider for provider in ordered if provider.name not in named]
    return entries


def weighted(group: list[ProviderConfig], sticky_key: str) -> list[ProviderConfig]:
    if len(group) == 1:
        return group
    total = sum(p.weight for p in group)
    if sticky_key:
        digest = hashlib.sha256(sticky_key.encode()).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64 * total
    else:
        point = random.random() * total  # noqa: S311 - a traffic split, not a secret
    first = group[-1]
    for provider in group:
        point -= provider.weight
        if point < 0:
            first = provider
            break
    rest = sorted((p for p in group if p is not first), key=lambda p: -p.weight)
    return [first, *rest]


def cloud_barred(walk: Walk) -> bool:
    request = walk.request
    return not request.allow_cloud or request.task in walk.policy.local_only_tasks


def skip_reason(provider: ProviderConfig, local_only: bool, context_floor: int, needed: int) -> str:
    """Why `provider` isn't tried for this request ("" if it is): a cloud the request may not
    use, or a context window too small (smaller than one that already said the prompt is too
    long, or than the request's estimated need: it goes to one with a larger window, and
    nothing counts against its breaker)."""
    if local_only and not provider.is_local:
        return SkipReason.CLOUD_NOT_ALLOWED
    if context_floor and provider.context_window <= context_floor:
        return TOO_SMALL
    if needed > provider.context_window:
        return TOO_SMALL
    return ""


async def in_turn(
    walk: Walk, candidates: Sequence[ProviderConfig], attempts: list[Attempt]
) -> AttemptResult | Refused | None:
    """Priority failover: one provider at a time until one answers (a call without a latency
    history, or a half-open probe, waited on up to the first-byte bound: `routing/hedge.py`)."""
    local_only = cloud_barred(walk)
    context_floor = 0
    needed = context_needed(walk.request.completion)
    for index, provider in enumerate(candidates):
        skip = skip_reason(provider, local_only, context_floor, needed)
        if skip:
            attempts.append(Attempt(provider.name, AttemptOutcome.SKIPPED, skip))
            continue
        if walk.deadline - walk.ports.clock.mono() < MIN_ATTEMPT_S:
            attempts.append(
                Attempt(provider.name, AttemptOutcome.SKIPPED, SkipReason.DEADLINE_EXCEEDED)
            )
            break
        # Another provider waits behind this one: a call without a history may be hedged.
        more = any(
            not skip_reason(later, local_only, context_floor, needed)
            for later in candidates[index + 1 :]
        )
        result = await attempt(walk, provider, may_hedge=more)
        attempts.append(result.attempt)
        if result.answered:
            return result
        if result.error is not None:
            rule = ERROR_TABLE[result.error.error_class]
            if not rule.try_next:
                return Refused(result.error, provider)
            if rule.larger_context_only:
                context_floor = max(context_floor, provider.context_window)
    return None


async def hedged(
    walk: Walk, candidates: Sequence[ProviderConfig], attempts: list[Attempt]
) -> AttemptResult | Refused | None:
    """Hedged failover: a provider that hasn't answered within `hedge_after_ms` gets company
    from the next one; the first good answer wins and the other call is cancelled. A call
    that fails is replaced at once, so at most two are in flight."""
    loop = asyncio.get_running_loop()
    hedge_s = walk.policy.hedge_after_ms / 1000
    queue = list(candidates)
    local_only = cloud_barred(walk)
    context_floor = 0
    needed = context_needed(walk.request.completion)
    running: dict[asyncio.Task[AttemptResult], asyncio.Event] = {}

    def launch() -> bool:
        while queue:
            provider = queue.pop(0)
            skip = skip_reason(provider, local_only, context_floor, needed)
            if skip:
                attempts.append(Attempt(provider.name, AttemptOutcome.SKIPPED, skip))
                continue
            if walk.deadline - walk.ports.clock.mono() < MIN_ATTEMPT_S:
                attempts.append(
                    Attempt(provider.name, AttemptOutcome.SKIPPED, SkipReason.DEADLINE_EXCEEDED)
                )
                queue.clear()
                return False
            cancel = asyncio.Event()
            running[asyncio.create_task(attempt(walk, provider, cancel))] = cancel
            return True
        return False

    in_flight = 1
    hedge_at = loop.time() + hedge_s
    try:
        while True:
            while len(running) < in_flight and launch():
                pass
            if not running:
                return None
            timeout = max(0.0, hedge_at - loop.time()) if in_flight == 1 and queue else None
            done, _ = await asyncio.wait(
                set(running), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:  # the hedge timer: ask the next provider too
                in_flight = 2
                continue
            winner: AttemptResult | None = None
            for task in done:
                del running[task]
                result = task.result()
                attempts.append(result.attempt)
                if result.answered:
                    if winner is None:
                        winner = result
                    else:  # two answers in the same instant: the second is discarded
                        await discard(walk, result)
                elif result.error is not None:
                    rule = ERROR_TABLE[result.error.error_class]
                    if not rule.try_next:
                        await cancel_all(walk, running, attempts)
                        provider = walk.snapshot.provider(result.attempt.provider)
                        assert provider is not None
                        return Refused(result.error, provider)
                    if rule.larger_context_only:
                        provider = walk.snapshot.provider(result.attempt.provider)
                        if provider is not None:
                            context_floor = max(context_floor, provider.context_window)
            if winner is not None:
                await cancel_all(walk, running, attempts)
                return winner
            if not running:  # every call so far failed: the next one starts a new round
                in_flight = 1
                hedge_at = loop.time() + hedge_s
    finally:
        for task in running:  # only when something above raised
            task.cancel()


async def cancel_all(
    walk: Walk,
    running: dict[asyncio.Task[AttemptResult], asyncio.Event],
    attempts: list[Attempt],
) -> None:
    for cancel in running.values():
        cancel.set()
    for result in await asyncio.gather(*running):
        attempts.append(result.attempt)
        if result.answered:
            await discard(walk, result)
    running.clear()


async def discard(walk: Walk, result: AttemptResult) -> None:
    """An answer that lost the race: a stream is closed and settled (as a good call)."""
    if result.stream is not None and result.ticket is not None:
        await result.stream.aclose()
        latency_s = walk.ports.clock.mono() - result.ticket.started
        completion = result.stream.completion(latency_s * 1000)
        await settle(walk, result.ticket, completion, None, latency_s, cache=False)
    result.attempt.detail = "not used: another provider answered first"
