"""A paid call's budget holds, taken before it and given back off its path when it ends
without a record: a standing hold this process kept for it, or its own reservation
(`docs/architecture.md`, "Budgets: reserve, then settle")."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.adapters.messages import CompletionRequest
from gateway.aio import spawn
from gateway.engine.budgets import (
    Hold,
    answer_tokens_reserved,
    hold_seconds,
    holds_for,
    prompt_tokens_reserved,
)
from gateway.engine.config import BudgetConfig, ProviderConfig
from gateway.routing.ports import Ports
from gateway.routing.walk import Walk
from gateway.state.contract import HoldRelease

# Releases of holds and probe slots off a request's path, kept until done (the loop holds
# tasks only weakly).
_releasing: set[asyncio.Task[None]] = set()


async def hold(
    walk: Walk, provider: ProviderConfig, holds: list[Hold], time_left: float
) -> HoldRelease | str:
    """The call's holds on its budgets: a standing hold this process kept for it (no round
    trip), or its own reservation; or why the budgets refuse it."""
    ports, request, name = walk.ports, walk.request, provider.name
    now = ports.clock.wall()
    keys = tuple(h.key for h in holds)
    pool = ports.readings.standing
    if not request.stream:  # a stream may outlive a standing hold's trusted half
        standing = pool.claim(name, holds, now)
        for stale in pool.take_stale():  # no longer trusted here: given back, off this path
            release_later(ports, stale)
        if standing is not None:
            return HoldRelease(standing, keys)
    holder = f"{request.request_id}:{name}"
    life_s = hold_seconds(
        provider, time_left, stream=request.stream, grace_s=walk.policy.request_deadline_s
    )
    reserved = await ports.store.reserve(holder, holds, now=now, life_s=life_s)
    ports.readings.note(None, None, reserved.spent, ports.clock.mono())
    return reserved.refusal or HoldRelease(holder, keys)


def reservation(
    completion: CompletionRequest,
    provider: ProviderConfig,
    budgets: list[BudgetConfig],
    keys: dict[int, tuple[str, int]],
    priority: str,
) -> list[Hold]:
    """What a call must hold against its budgets: its worst case, the prompt's tokens from
    above and the answer's most."""
    if not budgets:
        return []
    tokens_in = prompt_tokens_reserved(completion.all_text(), len(completion.history) + 1)
    # An embedding has no answer tokens: its inputs are all it costs.
    tokens_out = 0 if completion.embed else answer_tokens_reserved(completion.max_tokens)
    cost = provider.cost(tokens_in, tokens_out)
    return holds_for(budgets, keys, cost, tokens_in + tokens_out, priority)


def release_later(ports: Ports, release: HoldRelease) -> None:
    later(ports.store.release(release.holder, release.keys))


def later(work: Any) -> None:
    task = spawn(work)
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)
