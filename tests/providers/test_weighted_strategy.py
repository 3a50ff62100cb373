"""The weighted strategy and the priority strategy's indifference to weights, at `route()` (the
`bench` fixture, `route_bench.py`): providers of one priority share traffic by weight, each user
kept on one of them; on the memory store and on Redis. The hedged strategy, whose loser runs on
and is settled by the ledger, is tested end to end (`test_strategies.py`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

REQUESTS = 1000
BATCH = 50
# 1000 draws at 70 %: one standard deviation is about 1.5 points, so 6 is four of them.
TOLERANCE = 0.06
# No call counted stuck, nor passed over for its first byte, before 10 s: a batch of requests
# answered by one loop on a loaded 2-core machine can wait past the 1 s floor or the 1.5 s
# first-byte bound of a provider with no history yet, and either would move a request off its
# provider (the stuck rule and the bound have tests of their own).
UNHURRIED = {"stuck_floor_s": 10.0, "first_byte_bound_s": 10.0}
WEIGHTED = {"strategy": "weighted", **UNHURRIED}


def lopsided(bench) -> None:
    """The primary (priority 10) weighs next to nothing, the secondary (priority 20) all it
    can."""
    bench.provider("ollama-local", weight=1)
    bench.provider("openai-cloud", weight=10_000)


def share_one_priority(bench, *, local_weight: int = 70, cloud_weight: int = 30) -> None:
    bench.provider("ollama-local", priority=10, weight=local_weight)
    bench.provider("openai-cloud", priority=10, weight=cloud_weight)


async def providers_answering(bench, requests: list[dict[str, Any]]) -> list[str]:
    """The provider of each answer, the requests sent `BATCH` at a time."""
    answered: list[str] = []
    for start in range(0, len(requests), BATCH):
        batch = requests[start : start + BATCH]
        results = await asyncio.gather(*(bench.ask(**fields) for fields in batch))
        assert all(result.status == 200 for result in results)
        answered += [result.provider for result in results]
    return answered


def users(n: int) -> list[dict[str, Any]]:
    return [{"sticky_key": f"user-{i}"} for i in range(n)]


async def test_weighted_same_priority_providers_split_distinct_users_by_weight(
    bench, primary, secondary
):
    share_one_priority(bench)
    bench.policy(**WEIGHTED)

    answered = await providers_answering(bench, users(REQUESTS))

    split = Counter(answered)
    assert set(split) == {"ollama-local", "openai-cloud"}
    assert split["ollama-local"] / REQUESTS == pytest.approx(0.70, abs=TOLERANCE)
    assert (primary.calls, secondary.calls) == (split["ollama-local"], split["openai-cloud"])


async def test_weighted_the_same_user_always_lands_on_the_same_provider(bench):
    share_one_priority(bench, local_weight=50, cloud_weight=50)
    bench.policy(**WEIGHTED)
    names = [f"user-{i}" for i in range(10)]

    answered = await providers_answering(
        bench, [{"sticky_key": name} for name in names for _ in range(20)]
    )

    by_user = {name: set(answered[i * 20 : (i + 1) * 20]) for i, name in enumerate(names)}
    assert all(len(providers) == 1 for providers in by_user.values()), by_user
    # Ten users at 50/50 all on one side would be one chance in 500: stickiness isn't that.
    assert set().union(*by_user.values()) == {"ollama-local", "openai-cloud"}


async def test_weighted_requests_without_a_user_still_split_by_weight(bench):
    share_one_priority(bench)
    bench.policy(**WEIGHTED)

    answered = await providers_answering(bench, [{} for _ in range(REQUESTS)])

    share = Counter(answered)["ollama-local"] / REQUESTS
    assert share == pytest.approx(0.70, abs=TOLERANCE)


async def test_weighted_a_users_provider_failing_sends_the_user_to_the_other(bench, primary):
    share_one_priority(bench)
    bench.policy(**WEIGHTED)
    primary.set_fault(mode="error", status=503)

    answered = await providers_answering(bench, users(20))

    assert set(answered) == {"openai-cloud"}


async def test_weighted_weights_only_split_providers_of_the_same_priority(bench, secondary):
    lopsided(bench)
    bench.policy(**WEIGHTED)

    answered = await providers_answering(bench, users(50))

    assert set(answered) == {"ollama-local"}
    assert secondary.calls == 0


async def test_the_priority_strategy_ignores_weights(bench, secondary):
    share_one_priority(bench, local_weight=1, cloud_weight=10_000)
    bench.policy(strategy="priority", **UNHURRIED)

    answered = await providers_answering(bench, users(50))

    # Equal priorities keep their order by name: ollama-local before openai-cloud.
    assert set(answered) == {"ollama-local"}
    assert secondary.calls == 0


async def test_the_priority_strategy_sends_everything_to_the_lowest_priority(bench, secondary):
    lopsided(bench)
    bench.policy(**UNHURRIED)  # the priority strategy, the default

    answered = await providers_answering(bench, users(50))

    assert set(answered) == {"ollama-local"}
    assert secondary.calls == 0
