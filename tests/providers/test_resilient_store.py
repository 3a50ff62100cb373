"""ResilientStore: Redis while it answers, this process's memory while it doesn't. The outage is a
RedisStore pointed at a closed port (a stopped server, as a client sees it); no Redis needed."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from gateway.engine.breaker import BreakerState, Mode, State
from gateway.state import resilient_store as state_resilient
from gateway.state.contract import CacheWrite, RecordCall, Sample, SpendIncrement, Windows
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import ResilientStore
from tests.providers.test_state_stores import close_redis_store, flush_redis, redis_url

NAME = "ollama-local"
T0 = 1_700_000_000.0
WINDOWS = Windows(bucket_s=1, failure_window_s=60, p95_window_s=120)
SPEND = "spend:1:2023-11"
OTHER_SPEND = "spend:2:2023-11-14"
OTHER = "openai-cloud"
FAILED = Sample(ok=False, failure=True, slow=False, over_p95=False, latency_ms=120)


class MonotonicClock:
    """Stands in for the module's `time`: monotonic time the test moves, real wall time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> MonotonicClock:
    clock = MonotonicClock()
    # Only this module's name: asyncio reads the real time.monotonic for its own timeouts.
    monkeypatch.setattr(
        state_resilient, "time", SimpleNamespace(monotonic=clock.monotonic, time=clock.time)
    )
    return clock


@pytest.fixture
async def down(closed_port: int) -> AsyncIterator[ResilientStore]:
    primary = RedisStore(f"redis://127.0.0.1:{closed_port}/0")
    yield ResilientStore(primary)
    await close_redis_store(primary)


async def test_every_call_falls_back_to_local_state_without_raising(down):
    state, spent = await down.read(NAME, [SPEND])
    assert (state, spent) == (BreakerState(), {SPEND: 0.0})

    opened = BreakerState(state=State.OPEN, version=1, opened_at=T0, open_until=T0 + 60, reopens=1)
    assert await down.transition(NAME, 0, opened) is True
    half = BreakerState(state=State.HALF_OPEN, version=2, half_opened_at=T0 + 60, reopens=1)
    assert await down.transition(NAME, 1, half) is True
    assert await down.acquire_probe(NAME, 2, 3) is True

    recorded = await down.record(
        RecordCall(
            NAME,
            FAILED,
            now=T0 + 61,
            windows=WINDOWS,
            want_stats=True,
            probe_version=2,
            spend=(SpendIncrement(SPEND, 0.5, 3600),),
            read_spend=(SPEND, OTHER_SPEND),
        )
    )
    state, stats = recorded.state, recorded.stats
    assert (state.state, state.probes_admitted, state.consecutive_failures) == (
        State.HALF_OPEN,
        1,
        1,
    )
    assert stats is not None and (stats.calls, stats.failures) == (1, 1)
    assert recorded.spent == {SPEND: 0.5, OTHER_SPEND: 0.0}
    await down.seed_spend(SPEND, 0.25, 3600)  # the ledger's figure, behind the live counter
    assert (await down.read(NAME, [SPEND]))[1] == {SPEND: 0.5}

    summary = await down.summary(NAME, WINDOWS, T0 + 61)
    assert (summary.calls, summary.failures) == (1, 1)
    status = await down.status_read(
        [NAME, OTHER], windows=WINDOWS, now=T0 + 61, spend_keys=iter([SPEND])
    )
    assert status.breakers == {NAME: state, OTHER: BreakerState()}
    assert status.summaries[NAME] == summary and status.summaries[OTHER].calls == 0
    assert status.spent == {SPEND: 0.5}
    assert await down.set_mode(NAME, Mode.DISABLED) == BreakerState(mode=Mode.DISABLED, version=3)
    assert await down.config_version() == 0
    assert down.bump_config_version() == 1
    assert await down.config_version() == 1


async def test_while_redis_is_down_answers_are_cached_in_local_memory(down):
    key, answer = "cache:" + "ab" * 32, '{"text": "Zürich"}'
    await down.cache_put(key, answer, 60)
    assert await down.cache_get(key) == answer
    await down.record(
        RecordCall(
            NAME,
            FAILED,
            now=T0,
            windows=WINDOWS,
            want_stats=False,
            cache=CacheWrite("cache:recorded", answer, 60),
        )
    )
    assert await down.cache_get("cache:recorded") == answer
    assert await down.fallback.cache_get(key) == answer
    assert down.health()["ok"] is False


async def test_a_standing_hold_taken_in_local_memory_is_not_reported_as_taken(down):
    from gateway.engine.budgets import Hold
    from gateway.state.contract import StandingTake

    take = StandingTake("standing:x", (Hold(SPEND, 0.01, 1.0, 1.0, 3600),), 60)
    recorded = await down.record(
        RecordCall(NAME, FAILED, now=time.time(), windows=WINDOWS, want_stats=False, standing=take)
    )
    # Redis never held it: a call that claimed it once Redis is back would hold nothing.
    assert recorded.standing_taken is False


async def test_health_reports_routing_on_local_state_while_redis_is_down(down):
    assert down.health() == {"backend": "redis", "ok": True}
    await down.read(NAME)
    health = down.health()
    assert health["ok"] is False
    assert (health["backend"], health["routing_on"]) == ("redis", "local state")
    assert health["error"].startswith("ConnectionError")
    assert isinstance(health["since"], float)


async def test_the_outage_is_logged_once(down, clock, caplog):
    caplog.set_level(logging.ERROR, logger="gateway.state.resilient_store")
    for _ in range(5):
        await down.read(NAME)
        clock.now += ResilientStore.RETRY_AFTER_S  # each call tries Redis again, and fails
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "routing on this process's local state" in errors[0].getMessage()


async def test_redis_is_not_retried_until_retry_after_has_passed(down, clock, monkeypatch):
    tries = []
    real_read = down.primary.read

    async def counting_read(*args, **kwargs):
        tries.append(clock.now)
        return await real_read(*args, **kwargs)

    monkeypatch.setattr(down.primary, "read", counting_read)

    await down.read(NAME)
    assert tries == [1000.0]
    assert down._retry_at == 1000.0 + ResilientStore.RETRY_AFTER_S

    clock.now = 1000.5
    await down.read(NAME)
    assert tries == [1000.0]  # still inside the pause: straight to local state

    clock.now = 1001.0
    await down.read(NAME)
    assert tries == [1000.0, 1001.0]
    assert down._retry_at == 1001.0 + ResilientStore.RETRY_AFTER_S


@pytest.mark.services
async def test_with_redis_up_it_reads_and_writes_through_to_redis():
    url = redis_url()
    flush_redis(url)
    resilient, plain = ResilientStore(RedisStore(url)), RedisStore(url)
    try:
        opened = BreakerState(state=State.OPEN, version=1, open_until=T0 + 60, reopens=1)
        assert await resilient.transition(NAME, 0, opened)
        assert (await plain.read(NAME))[0] == opened

        await plain.seed_spend(SPEND, 2.5, 3600)
        assert (await resilient.read(NAME, [SPEND])) == (opened, {SPEND: 2.5})
        assert resilient.bump_config_version() == 1
        assert await plain.config_version() == 1

        await resilient.cache_put("cache:put", "ü", 60)
        recorded = CacheWrite("cache:recorded", "ß", 60)
        answered = await resilient.record(
            RecordCall(
                NAME,
                FAILED,
                now=T0,
                windows=WINDOWS,
                want_stats=False,
                cache=recorded,
                read_spend=(SPEND,),
            )
        )
        assert answered.spent == {SPEND: 2.5}
        status = await resilient.status_read([NAME], windows=WINDOWS, now=T0, spend_keys=[SPEND])
        assert status.breakers[NAME] == answered.state == (await plain.read(NAME))[0]
        assert status.summaries[NAME] == await plain.summary(NAME, WINDOWS, T0)
        assert (status.summaries[NAME].calls, status.spent) == (1, {SPEND: 2.5})
        assert await plain.cache_get("cache:put") == "ü"
        assert await plain.cache_get("cache:recorded") == "ß"
        assert await resilient.fallback.cache_get("cache:put") is None
        assert resilient.health() == {"backend": "redis", "ok": True}
    finally:
        await close_redis_store(resilient.primary)
        await close_redis_store(plain)
        flush_redis(url)


@pytest.mark.services
async def test_a_change_committed_while_redis_was_down_reaches_it_once_it_is_back(
    closed_port, tmp_path
):
    import shutil
    import subprocess
    import time as clock

    import redis as redis_client

    from gateway.state.redis_scripts import VERSION_KEY

    url = f"redis://127.0.0.1:{closed_port}/0"
    store = ResilientStore(RedisStore(url))
    store.RETRY_AFTER_S = 0.0
    assert store.bump_config_version() == 1  # Redis down: this process only
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(closed_port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = clock.monotonic() + 10
        while True:
            try:
                redis_client.Redis.from_url(url).ping()
                break
            except redis_client.ConnectionError:
                assert clock.monotonic() < deadline
                clock.sleep(0.05)
        await store.read(NAME)  # the next call that reaches Redis carries the change over
        assert int(redis_client.Redis.from_url(url).get(VERSION_KEY)) == 1
        await store.aclose()
    finally:
        server.kill()
        server.wait()
