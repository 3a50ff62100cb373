"""A provider that hangs from its very first request: with no latency history to judge a call
by, the request goes on at the first-byte bound while the call runs on (`routing/hedge.py`);
a model that is only loading is told from a wedged one, and isn't punished for it."""

from __future__ import annotations

import asyncio
import time

from gateway.engine.breaker import BreakerState, State
from gateway.routing.breaker_watch import MIN_SAMPLES
from gateway.routing.settling import windows
from tests.providers.conftest import ask, ledger_rows, update_policy, update_provider

BOUND_S = 0.3


async def _timed(api) -> tuple[float, dict]:
    started = time.monotonic()
    response = await ask(api, cache=False)
    assert response.status_code == 200
    return time.monotonic() - started, response.json()


async def until(predicate, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not await predicate():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


async def test_a_primary_that_hangs_from_its_first_request_is_left_at_the_bound(
    api, gateway, primary, secondary
):
    await update_policy(gateway, first_byte_bound_s=BOUND_S)
    await update_provider(gateway, "ollama-local", timeout_s=1.5)
    primary.set_fault(mode="hang")
    answers = await asyncio.gather(*(_timed(api) for _ in range(4)))
    assert all(body["provider"] == "openai-cloud" for _, body in answers)
    assert max(seconds for seconds, _ in answers) < BOUND_S + 0.7
    # Hedged, not cancelled: the calls still wait on the primary, and nothing is counted yet.
    assert gateway.in_flight.count("ollama-local") == 4
    state, _ = await gateway.store.read("ollama-local")
    assert (state.state, state.consecutive_failures) == (State.CLOSED, 0)
    records = await ledger_rows(gateway)
    for record in records:
        first, second = record.attempts
        assert (first["outcome"], first["error_class"]) == ("hedged", "slow_first_byte")
        assert "no latency history yet" in first["detail"]
        assert (second["provider"], second["outcome"]) == ("openai-cloud", "ok")
        assert record.reason == "primary_slow_first_byte"

    # Their own timeouts are what count: three in a row open the breaker.
    async def opened() -> bool:
        state, _ = await gateway.store.read("ollama-local")
        return state.state == State.OPEN

    await until(opened, within_s=3.0)
    state, _ = await gateway.store.read("ollama-local")
    assert state.reason == "consecutive_failures"
    assert gateway.in_flight.count("ollama-local") == 0


async def test_a_primary_with_a_history_is_judged_by_it_not_by_the_bound(api, gateway, primary):
    await update_policy(gateway, first_byte_bound_s=BOUND_S, slow_call_s=30, p95_latency_s=30)
    for _ in range(MIN_SAMPLES):
        assert (await ask(api, cache=False)).json()["provider"] == "ollama-local"
    primary.set_fault(mode="slow", delay_ms=500)  # past the bound, under its stuck threshold
    seconds, body = await _timed(api)
    assert body["provider"] == "ollama-local" and seconds >= 0.5


async def test_a_late_answer_of_a_hedged_call_counts_as_a_good_call_and_is_cached(
    api, gateway, primary, secondary
):
    await update_policy(gateway, first_byte_bound_s=BOUND_S)
    primary.set_fault(mode="slow", delay_ms=700)
    seconds, body = await _timed(api)
    assert body["provider"] == "openai-cloud" and seconds < BOUND_S + 0.5
    await asyncio.sleep(0.8)  # the primary's answer arrives and is settled alone
    assert gateway.in_flight.count("ollama-local") == 0
    state, _ = await gateway.store.read("ollama-local")
    assert (state.state, state.consecutive_failures) == (State.CLOSED, 0)
    # Its whole latency, not the bound's 0.3 s (the provider's 700 ms timer may fire a
    # millisecond early: libuv times it from the loop's cached clock).
    assert gateway.stuck.latencies._rings["answer:ollama-local"][-1] >= 0.69


async def test_a_half_open_probe_is_hedged_and_its_late_answer_closes_the_breaker(
    api, gateway, primary, secondary, clock
):
    await update_policy(gateway, first_byte_bound_s=BOUND_S, half_open_probes=1, slow_call_s=30)
    for _ in range(MIN_SAMPLES):  # a history: only the probe gets the bound
        assert (await ask(api, cache=False)).json()["provider"] == "ollama-local"
    state, _ = await gateway.store.read("ollama-local")
    opened = BreakerState(state=State.OPEN, version=state.version + 1, open_until=clock.wall() - 1)
    assert await gateway.store.transition("ollama-local", state.version, opened)
    gateway.readings.clear()  # as if this process had heard it (with Redis: within 0.5 s)
    primary.set_fault(mode="slow", delay_ms=800)
    seconds, body = await _timed(api)
    # The client didn't wait on the probe ...
    assert body["provider"] == "openai-cloud" and seconds < BOUND_S + 0.5
    [record] = list(await ledger_rows(gateway))[-1:]
    assert "a half-open probe" in record.attempts[0]["detail"]

    # ... whose answer, when it came, closed the breaker.
    async def closed() -> bool:
        state, _ = await gateway.store.read("ollama-local")
        return state.state == State.CLOSED

    await until(closed, within_s=2.0)


async def test_a_loading_model_is_not_punished_for_its_load(api, gateway, primary, secondary):
    await update_policy(gateway, first_byte_bound_s=BOUND_S, consecutive_failures=1)
    await update_provider(gateway, "ollama-local", timeout_s=1.0)
    primary.set_fault(mode="loading", load_ms=2500)  # longer than the primary's timeout
    seconds, body = await _timed(api)
    assert body["provider"] == "openai-cloud" and seconds < BOUND_S + 0.7
    await asyncio.sleep(1.2)  # its call timed out while the model loaded: counted as nothing
    state, _ = await gateway.store.read("ollama-local")
    assert (state.state, state.consecutive_failures) == (State.CLOSED, 0)
    await asyncio.sleep(1.2)  # loaded: the primary serves again at once
    seconds, body = await _timed(api)
    assert body["provider"] == "ollama-local"


async def test_a_wedged_model_is_counted_where_a_loading_one_is_not(
    api, gateway, primary, secondary
):
    await update_policy(gateway, first_byte_bound_s=BOUND_S, consecutive_failures=1)
    await update_provider(gateway, "ollama-local", timeout_s=1.0)
    primary.set_fault(mode="hang")  # /api/ps lists the model as loaded: wedged
    seconds, body = await _timed(api)
    assert body["provider"] == "openai-cloud"

    async def opened() -> bool:
        state, _ = await gateway.store.read("ollama-local")
        return state.state == State.OPEN

    await until(opened, within_s=2.0)


async def test_a_hedged_streams_late_first_piece_is_never_cached_as_the_answer(
    api, gateway, primary, secondary
):
    # The hedged stream is closed after its first piece: that piece is no answer to keep, and
    # must not replace the whole one the next provider streamed.
    await update_policy(gateway, first_byte_bound_s=BOUND_S)
    primary.set_fault(mode="slow", delay_ms=700, text="The primary's answer, cut short.")
    secondary.set_fault(text="The whole answer from the cloud.")
    chat = {"model": "auto", "messages": [{"role": "user", "content": "Say hello."}]}
    streamed = await api.post("/v1/chat/completions", json={**chat, "stream": True})
    assert streamed.headers["X-Failover-Tier"] == "secondary"

    async def recorded() -> bool:  # the hedged call, settled alone once its stream came
        policy = (await gateway.snapshots.current()).policy
        read = await gateway.store.status_read(
            ["ollama-local"], windows=windows(policy), now=gateway.clock.wall()
        )
        return read.summaries["ollama-local"].calls >= 1

    await until(recorded, within_s=5.0)
    primary.set_fault(mode="error", status=500)
    secondary.set_fault(mode="error", status=500)
    cached = await api.post("/v1/chat/completions", json=chat)
    assert cached.headers["X-Failover-Tier"] == "cache"
    assert cached.json()["choices"][0]["message"]["content"] == "The whole answer from the cloud."
