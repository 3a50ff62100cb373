"""The breaker's cycle as the walk meets it, at `route()` (the `bench` fixture,
`route_bench.py`): opened by failures, probed after its cooldown, re-opened with a longer one,
held off by a rate limit or at once by a refused key; on the memory store and on Redis."""

from __future__ import annotations

import asyncio

import pytest

from gateway.engine.breaker import State
from gateway.routing.walk import Attempt, AttemptOutcome, Tier


async def test_three_consecutive_failures_open_the_breaker_and_the_primary_gets_no_more_calls(
    bench, primary, secondary
):
    primary.set_fault(mode="error")
    for _ in range(3):
        assert (await bench.ask()).provider == "openai-cloud"
    assert primary.calls == 3
    for _ in range(5):
        result = await bench.ask()
        assert (result.provider, result.tier) == ("openai-cloud", Tier.SECONDARY)
    assert primary.calls == 3
    assert result.reason == "primary_breaker_open"
    assert result.attempts[0] == Attempt(
        provider="ollama-local", outcome=AttemptOutcome.SKIPPED, error_class="breaker_open"
    )


async def _open_primary(bench, primary) -> None:
    primary.set_fault(mode="error")
    for _ in range(3):
        await bench.ask()
    primary.set_fault(mode="ok")


async def test_after_the_cooldown_exactly_n_probes_then_closed_and_the_backoff_resets(
    bench, clock, primary, secondary
):
    await _open_primary(bench, primary)
    calls_when_opened = primary.calls
    clock.advance(59)
    await bench.ask()
    assert primary.calls == calls_when_opened  # still cooling down
    clock.advance(2)
    primary.set_fault(mode="slow", delay_ms=300)
    results = await asyncio.gather(*(bench.ask() for _ in range(10)))
    assert primary.calls - calls_when_opened == 3  # three probes in total, not ten
    providers = [result.provider for result in results]
    assert providers.count("ollama-local") == 3 and providers.count("openai-cloud") == 7
    state, _ = await bench.ports.store.read("ollama-local")
    assert state.state == State.CLOSED and state.reopens == 0
    assert (await bench.ask()).provider == "ollama-local"


async def test_a_failed_probe_reopens_with_a_longer_cooldown(bench, clock, primary):
    await _open_primary(bench, primary)
    clock.advance(61)
    primary.set_fault(mode="error")
    await bench.ask()  # the probe fails
    state, _ = await bench.ports.store.read("ollama-local")
    assert state.state == State.OPEN and state.open_until - clock.now == pytest.approx(120)
    calls = primary.calls
    clock.advance(61)
    await bench.ask()
    assert primary.calls == calls  # 60 s is no longer enough
    clock.advance(60)
    primary.set_fault(mode="ok")
    assert (await bench.ask()).provider == "ollama-local"


async def test_a_429_with_retry_after_means_no_call_before_it_expires(bench, clock, primary):
    primary.set_fault(mode="rate_limit", retry_after="30")
    assert (await bench.ask()).provider == "openai-cloud"
    assert primary.calls == 1
    primary.set_fault(mode="ok")
    clock.advance(29)
    await bench.ask()
    assert primary.calls == 1
    clock.advance(2)
    assert (await bench.ask()).provider == "ollama-local"
    state, _ = await bench.ports.store.read("ollama-local")
    assert state.reopens == 0  # a rate limit is not a failure: no growing backoff


async def test_a_401_opens_the_breaker_at_once(bench, primary):
    primary.set_fault(mode="unauthorized")
    await bench.ask()
    state, _ = await bench.ports.store.read("ollama-local")
    assert (state.state, state.reason) == (State.OPEN, "auth")
    await bench.ask()
    assert primary.calls == 1
