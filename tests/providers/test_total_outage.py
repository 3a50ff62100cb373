"""Back fast after a total outage: while every breaker is open, one trickle call at a time per
process finds the first provider back (`routing/trickle.py`), and each open breaker is probed
the moment its cooldown ends (`runtime/jobs.py` `recovery_job`)."""

from __future__ import annotations

import asyncio
import time

from gateway.engine.breaker import BreakerState, State
from gateway.routing.outage_watch import TRICKLE_EVERY_S
from tests.providers.conftest import ask, ledger_rows, update_policy


async def _both_open(api, gateway, primary, secondary) -> None:
    """Both providers fail once with consecutive_failures 1 and a long cooldown: both open."""
    await update_policy(gateway, consecutive_failures=1, cooldown_s=600, max_cooldown_s=3600)
    primary.set_fault(mode="error", status=500, scope="all")
    secondary.set_fault(mode="error", status=500, scope="all")
    assert (await ask(api, cache=False)).json()["tier"] in ("static", "degraded")


async def _state(gateway, name: str) -> BreakerState:
    state, _ = await gateway.store.read(name)
    return state


async def test_the_first_provider_back_answers_at_once_though_its_cooldown_has_not_ended(
    api, gateway, primary, secondary
):
    await _both_open(api, gateway, primary, secondary)
    assert (await _state(gateway, "ollama-local")).state == State.OPEN
    primary.reset()
    secondary.reset()
    await asyncio.sleep(TRICKLE_EVERY_S)
    body = (await ask(api, cache=False)).json()
    # The trickle went to the provider whose cooldown ends first, and its answer is real.
    assert (body["tier"], body["provider"]) == ("primary", "ollama-local")
    opened = await _state(gateway, "ollama-local")
    assert (opened.state, opened.reason) == (State.HALF_OPEN, "consecutive_failures")
    [*_, record] = await ledger_rows(gateway)
    assert "let through while every breaker is open" in record.attempts[-1]["detail"]
    # The next requests carry the probes that close it.
    for _ in range(3):
        assert (await ask(api, cache=False)).json()["provider"] == "ollama-local"
    assert (await _state(gateway, "ollama-local")).state == State.CLOSED
    assert (await _state(gateway, "openai-cloud")).state == State.OPEN  # nobody asked it


async def test_a_dead_upstream_gets_a_trickle_never_a_pile(api, gateway, primary, secondary):
    await _both_open(api, gateway, primary, secondary)
    calls = primary.calls
    answers = await asyncio.gather(*(ask(api, cache=False) for _ in range(8)))
    assert all(a.json()["tier"] in ("static", "degraded") for a in answers)
    assert primary.calls == calls + 1  # one at a time, one a second
    assert secondary.calls_to("/v1/chat/completions") == 1  # only the call that opened it
    # Its failure changed nothing: still open, its cooldown not grown.
    state = await _state(gateway, "ollama-local")
    assert (state.state, state.reopens) == (State.OPEN, 1)
    await asyncio.sleep(TRICKLE_EVERY_S)
    await ask(api, cache=False)
    assert primary.calls == calls + 2


async def test_a_trickle_call_to_a_hung_provider_keeps_no_client_waiting(
    api, gateway, primary, secondary
):
    await _both_open(api, gateway, primary, secondary)
    await update_policy(gateway, first_byte_bound_s=0.3)
    primary.set_fault(mode="hang")
    started = time.monotonic()
    body = (await ask(api, cache=False)).json()
    assert body["tier"] in ("static", "degraded") and time.monotonic() - started < 1.0
    [*_, record] = await ledger_rows(gateway)
    assert record.attempts[-1]["outcome"] == "hedged"


async def test_an_open_breaker_is_probed_the_moment_its_cooldown_ends(gateway, primary, clock):
    from runtime.jobs import RECOVERY
    from runtime.scheduler import InProcessScheduler

    await update_policy(gateway, half_open_probes=1)
    state = await _state(gateway, "ollama-local")
    opened = BreakerState(state=State.OPEN, version=state.version + 1, open_until=clock.wall() + 2)
    assert await gateway.store.transition("ollama-local", state.version, opened)
    scheduler = InProcessScheduler(gateway, (RECOVERY,))
    scheduler.start()
    try:
        await asyncio.sleep(1.2)
        assert (await _state(gateway, "ollama-local")).state == State.OPEN  # still cooling down
        clock.advance(2)
        deadline = time.monotonic() + 3
        while (await _state(gateway, "ollama-local")).state != State.CLOSED:
            assert time.monotonic() < deadline, "not probed within a second of its cooldown"
            await asyncio.sleep(0.05)
    finally:
        await scheduler.stop()
