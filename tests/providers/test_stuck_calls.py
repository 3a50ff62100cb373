"""Stuck calls: a call still waiting past its provider's usual time counts against the breaker at
once, and once the breaker gives up on the provider the calls waiting on it are cancelled and
moved on to the next one (`gateway/routing/stuck.py`)."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.adapters.messages import CompletionRequest
from gateway.adapters.pool import AdapterPool
from gateway.engine import breaker
from gateway.engine.breaker import BreakerState, Mode, State, WindowStats
from gateway.engine.clock import Clock
from gateway.engine.config import PolicyConfig, ProviderConfig, Snapshot
from gateway.routing.breaker_watch import MIN_SAMPLES, Latencies, gave_up
from gateway.routing.ports import Ports
from gateway.routing.stuck import POLL_S, StuckGuard
from gateway.routing.walk import RouteRequest, Ticket, Walk
from gateway.state.memory_store import MemoryStore
from runtime.gateway import settings_for_clients
from tests.providers.conftest import ask, ledger_rows, update_policy

POLICY = PolicyConfig()


class TestTheThreshold:
    pytestmark = pytest.mark.backend_free

    def test_it_follows_the_providers_own_latency_within_the_floor_and_the_cap(self):
        assert breaker.stuck_after(None, POLICY) == POLICY.stuck_cap_s == 10.0  # no history
        assert breaker.stuck_after(0.012, POLICY) == POLICY.stuck_floor_s == 1.0  # milliseconds
        assert breaker.stuck_after(0.9, POLICY) == pytest.approx(2.7)  # 3 × its p99
        # A self-hosted model that normally takes 4–8 s: only past the cap, never at 8 s.
        assert breaker.stuck_after(8.0, POLICY) == 10.0
        tuned = PolicyConfig(stuck_multiplier=2, stuck_floor_s=0.5, stuck_cap_s=30)
        assert breaker.stuck_after(8.0, tuned) == 16.0
        assert breaker.stuck_after(0.1, tuned) == 0.5

    def test_the_p99_waits_for_enough_answers_then_tracks_the_recent_ones(self):
        latencies = Latencies()
        for _ in range(MIN_SAMPLES - 1):
            latencies.note("answer:ollama", 0.01)
        assert latencies.p99("answer:ollama") is None  # too few to judge by
        latencies.note("answer:ollama", 0.01)
        assert latencies.p99("answer:ollama") == 0.01
        for _ in range(200):  # a slower model now: the ring forgets the fast answers
            latencies.note("answer:ollama", 6.0)
        assert latencies.p99("answer:ollama") == 6.0
        assert latencies.p99("first_token:ollama") is None  # each measure apart

    def test_a_breaker_gives_up_when_it_opens_or_an_operator_disables_it(self):
        closed = BreakerState(version=4)
        assert not gave_up(closed, closed)
        assert gave_up(closed, BreakerState(state=State.OPEN, version=5))
        assert gave_up(closed, BreakerState(state=State.HALF_OPEN, version=6))
        assert gave_up(closed, BreakerState(mode=Mode.DISABLED, version=5))
        assert not gave_up(closed, BreakerState(mode=Mode.FORCED_CLOSED, version=5))
        probing = BreakerState(state=State.HALF_OPEN, version=6)
        assert not gave_up(probing, probing)  # still the round that admitted this probe

    def test_an_older_reading_than_the_calls_own_is_no_news(self):
        """The "open" a process heard before the cooldown ended, checked by a probe the
        half-open breaker has since admitted: the probe goes on."""
        probing = BreakerState(state=State.HALF_OPEN, version=6)
        assert not gave_up(probing, BreakerState(state=State.OPEN, version=5))
        assert not gave_up(probing, BreakerState(mode=Mode.DISABLED, version=5))
        assert gave_up(probing, BreakerState(state=State.OPEN, version=7))  # the probe failed


class TestTheBreakerCountsStuckCalls:
    """The stuck-call rule as pure breaker code with a moved clock."""

    pytestmark = pytest.mark.backend_free

    def test_three_stuck_calls_open_it_as_three_failures_would(self):
        now, state = 1000.0, BreakerState()
        for count in (1, 2, 3):
            state = BreakerState(version=state.version, consecutive_failures=count)
            moved, events = breaker.on_outcome(
                "ollama", state, WindowStats(), breaker.stuck_outcome(1.0), POLICY, now,
                was_probe=False,
            )  # fmt: skip
            now += 0.02
        assert moved is not None and moved.state == State.OPEN
        assert moved.reason == "stuck_calls" and moved.open_until == pytest.approx(now - 0.02 + 60)
        assert [e.kind for e in events] == [breaker.EventKind.OPENED]

    def test_a_stuck_probe_reopens_with_the_next_backoff(self):
        half_open = BreakerState(state=State.HALF_OPEN, version=8, reopens=1)
        moved, _ = breaker.on_outcome(
            "ollama", half_open, None, breaker.stuck_outcome(1.0), POLICY, 500.0, was_probe=True
        )
        assert moved is not None and moved.state == State.OPEN
        assert (moved.reason, moved.open_until) == ("probe_failed", 500.0 + 120)


async def _warm(api, times: int = MIN_SAMPLES + 2) -> None:
    """Answers in milliseconds, so the primary's threshold is the floor."""
    for _ in range(times):
        response = await ask(api, cache=False)
        assert response.json()["provider"] == "ollama-local"


async def _timed(api) -> tuple[float, dict]:
    started = time.monotonic()
    response = await ask(api, cache=False)
    assert response.status_code == 200
    return time.monotonic() - started, response.json()


@pytest.mark.parametrize("strategy", ["priority", "hedged"])
async def test_a_black_holed_primary_opens_and_its_waiting_requests_move_on(
    api, gateway, primary, secondary, strategy
):
    # Hedged: a hedge only after 5 s, so it is the stuck rule that moves the requests on.
    await update_policy(gateway, stuck_floor_s=0.4, strategy=strategy, hedge_after_ms=5000)
    await _warm(api)
    primary.set_fault(mode="hang")  # accepts, never answers: the timeout is 15 s
    answers = await asyncio.gather(*(_timed(api) for _ in range(6)))
    # Each waited about the floor (and one store poll at most), never the 15 s timeout.
    assert all(body["provider"] == "openai-cloud" for _, body in answers)
    assert max(seconds for seconds, _ in answers) < 0.4 + POLL_S + 1.0
    state, _ = await gateway.store.read("ollama-local")
    assert (state.state, state.reason) == (State.OPEN, "stuck_calls")
    records = [r for r in await ledger_rows(gateway) if r.final_provider == "openai-cloud"]
    assert len(records) == 6
    for record in records:
        first, second = record.attempts
        assert first["provider"] == "ollama-local" and first["outcome"] == "cancelled"
        assert "its breaker opened" in first["detail"]
        assert (second["provider"], second["outcome"]) == ("openai-cloud", "ok")
        assert record.reason == f"primary_{first['error_class']}"
    # Three counted stuck opened it; a call admitted a moment later may hear it open first.
    kinds = [record.attempts[0]["error_class"] for record in records]
    assert kinds.count("stuck") >= 3 and set(kinds) <= {"stuck", "breaker_opened"}
    assert all(
        r.attempts[0]["latency_ms"] >= 400
        for r in records
        if r.attempts[0]["error_class"] == "stuck"
    )
    assert gateway.in_flight.count("ollama-local") == 0
    # The next request doesn't try it at all.
    seconds, body = await _timed(api)
    assert body["provider"] == "openai-cloud" and seconds < 0.4


async def test_a_slow_answer_counted_stuck_is_not_counted_again_when_it_comes(
    api, gateway, primary, clock
):
    await update_policy(gateway, stuck_floor_s=0.2, slow_call_s=30, p95_latency_s=30)
    await _warm(api)
    primary.set_fault(mode="slow", delay_ms=600)
    seconds, body = await _timed(api)
    assert body["provider"] == "ollama-local" and seconds >= 0.6  # one stuck call: still served
    state, _ = await gateway.store.read("ollama-local")
    assert state.state == State.CLOSED
    # Counted once, as the failure it was while it waited: not once more as a success.
    assert state.consecutive_failures == 1
    stats = await gateway.store.summary("ollama-local", _windows(), clock.wall())
    assert (stats.calls, stats.failures) == (MIN_SAMPLES + 2 + 1, 1)
    [record] = [r for r in await ledger_rows(gateway) if r.attempts[0].get("latency_ms", 0) >= 600]
    assert record.attempts[0]["outcome"] == "ok"


async def test_a_breaker_opened_by_another_process_moves_a_stuck_call_on(
    api, gateway, primary, secondary
):
    await update_policy(gateway, stuck_floor_s=0.3, consecutive_failures=5)
    await _warm(api)
    primary.set_fault(mode="hang")
    waiting = asyncio.ensure_future(_timed(api))
    await asyncio.sleep(0.5)  # stuck (one failure of five): still waiting
    assert not waiting.done()
    # Another process opens the breaker: this one hears it at its next poll of the store.
    state, _ = await gateway.store.read("ollama-local")
    opened = BreakerState(state=State.OPEN, version=state.version + 1, open_until=time.time() + 60)
    assert await gateway.store.transition("ollama-local", state.version, opened)
    seconds, body = await asyncio.wait_for(waiting, 2 * POLL_S + 0.5)
    assert body["provider"] == "openai-cloud" and seconds < 0.5 + 2 * POLL_S + 0.3


def _windows():
    from gateway.routing.settling import windows

    return windows(PolicyConfig())


async def _stream(api) -> str:
    response = await api.post(
        "/v1/chat/completions",
        json={"model": "auto", "stream": True, "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert response.status_code == 200
    return response.text


async def test_a_stream_that_stalls_past_its_providers_usual_pause_counts_stuck_and_goes_on(
    api, gateway, primary, clock
):
    await update_policy(gateway, stuck_floor_s=0.3)
    for _ in range(MIN_SAMPLES):  # pieces milliseconds apart: the pause allowed is the floor
        assert "[DONE]" in await _stream(api)
    primary.set_fault(chunk_delay_ms=700)  # 15 s would be the provider's timeout
    text = await _stream(api)
    # What the client has read can't be taken back: the stream goes on to its end ...
    assert "[DONE]" in text and "stream_interrupted" not in text
    # ... but the stall counted against the breaker while it lasted, once.
    state, _ = await gateway.store.read("ollama-local")
    assert state.consecutive_failures == 1
    stats = await gateway.store.summary("ollama-local", _windows(), clock.wall())
    assert (stats.calls, stats.failures) == (MIN_SAMPLES + 1, 1)
    [record] = list(await ledger_rows(gateway))[-1:]
    assert (record.outcome, record.attempts[0]["outcome"]) == ("ok", "ok")


async def test_a_call_not_yet_stuck_is_moved_on_when_its_breaker_opens(
    api, gateway, primary, secondary
):
    # No answers yet to judge by: its threshold is the cap (10 s), far off.
    primary.set_fault(mode="hang")
    waiting = asyncio.ensure_future(_timed(api))
    await asyncio.sleep(0.3)
    state, _ = await gateway.store.read("ollama-local")
    opened = BreakerState(state=State.OPEN, version=state.version + 1, open_until=time.time() + 60)
    assert await gateway.store.transition("ollama-local", state.version, opened)
    # The next request of this process that reads the breaker (with Redis, once what it last
    # heard is 0.5 s old) finds it open: the waiting one hears it.
    await asyncio.sleep(0.6)
    seconds, body = await _timed(api)
    assert body["provider"] == "openai-cloud"
    seconds, body = await asyncio.wait_for(waiting, 1.0)
    assert body["provider"] == "openai-cloud" and seconds < 1.5  # its timeout is 5 s
    [moved] = [r for r in await ledger_rows(gateway) if r.attempts[0]["outcome"] == "cancelled"]
    assert moved.attempts[0]["outcome"] == "cancelled"
    assert moved.attempts[0]["error_class"] == "breaker_opened"
    assert moved.reason == "primary_breaker_opened"


class _SlowRecords(MemoryStore):
    """The in-process store, with a record that takes 0.3 s to come back (a slow Redis)."""

    async def record(self, call):
        await asyncio.sleep(0.3)
        return await super().record(call)


@pytest.mark.backend_free
async def test_an_answer_in_the_same_instant_as_an_opening_is_kept():
    """The call answers, and in the same loop turn its breaker is heard to open while its own
    stuck count is still on its way: the answer wins, the request is not cancelled."""
    store = _SlowRecords()
    ports = Ports(store=store, clock=Clock(), adapters=AdapterPool(settings_for_clients()))
    provider = ProviderConfig(
        name="p", kind="ollama", base_url="http://127.0.0.1:1", model="m", priority=1,
        is_local=True, timeout_s=15.0, context_window=8192,
    )  # fmt: skip
    request = CompletionRequest(prompt="Hi")
    snapshot = Snapshot(version=1, providers=(provider,), policy=POLICY)
    walk = Walk(RouteRequest(request, "r1"), snapshot, ports, time.monotonic() + 30, "", [])
    ticket = Ticket(provider, None, BreakerState(), False, [], {}, time.monotonic(), request)
    answer = asyncio.get_running_loop().create_future()

    async def call():
        async with StuckGuard(walk, ticket, 0.05, 15.0):
            return await answer

    task = asyncio.ensure_future(call())
    await asyncio.sleep(0.1)  # stuck, its count on its way
    answer.set_result("the answer")
    ports.stuck.heard("p", BreakerState(state=State.OPEN, version=2))
    assert await task == "the answer"
    assert ticket.counted  # by its stuck count, once
