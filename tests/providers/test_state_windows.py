"""The statistics windows (an operator's reset, the p95 shown) and what the stores answer in one
round trip (`record`'s breaker, health and spend; `status_read`), on MemoryStore and on
RedisStore against the test Redis (services pass). Time is the `now` passed in; nothing sleeps."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from gateway.engine.breaker import BreakerState, Mode, Outcome, State, WindowStats, on_outcome
from gateway.engine.config import PolicyConfig
from gateway.engine.health import Health
from gateway.state import histogram
from gateway.state.contract import CacheWrite, RecordCall, SpendIncrement, StateStore
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from tests.providers.conftest import count_redis_writes
from tests.providers.test_state_stores import (
    NAME,
    OTHER_SPEND,
    SPEND,
    T0,
    WINDOWS,
    call,
    checks,
    fresh_redis_store,
    record,
    redis_url,
)


@pytest.fixture
async def redis_store() -> AsyncIterator[RedisStore]:
    async for store in fresh_redis_store():
        yield store


@pytest.fixture(
    params=[
        pytest.param("memory"),
        pytest.param("redis", marks=pytest.mark.services),
    ]
)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StateStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    async for redis_store in fresh_redis_store():
        yield redis_store


# An operator's reset ---------------------------------------------------------------------


async def test_set_mode_starts_the_window_afresh_for_the_breaker_and_the_summary(store):
    for second in range(4):
        await record(store, T0 + second, sample=call(failure=True, latency_ms=6000, slow=True))
    await store.set_mode(NAME, Mode.AUTO)
    # The same bucket as the last call before the reset, and a fresh one.
    stats = (await record(store, T0 + 3, sample=call(failure=True), want_stats=True)).stats
    assert stats == WindowStats(1, 1, 0, p95_calls=1, over_p95=0, p95_calls_recent=1)
    stats = (await record(store, T0 + 4, sample=call(), want_stats=True)).stats
    assert stats == WindowStats(2, 1, 0, p95_calls=2, over_p95=0, p95_calls_recent=2)
    summary = await store.summary(NAME, WINDOWS, T0 + 4)
    assert (summary.calls, summary.failures, summary.failure_rate_pct) == (2, 1, 50.0)
    assert summary.p95_ms == pytest.approx(100, rel=0.05)  # the 6 s calls are gone


async def test_set_mode_with_nothing_recorded_after_it_summarizes_to_nothing(store):
    await record(store, T0, sample=call(failure=True))
    await store.set_mode(NAME, Mode.DISABLED)
    summary = await store.summary(NAME, WINDOWS, T0 + 1)
    assert (summary.calls, summary.failures, summary.p95_ms) == (0, 0, None)


async def test_one_failure_after_an_operators_reset_does_not_trip_the_breaker_again(store):
    policy = PolicyConfig()  # 3 consecutive failures, or 30 % of at least 5 calls
    for second in range(4):
        await record(store, T0 + second, sample=call(failure=True))
    await store.set_mode(NAME, Mode.AUTO)
    recorded = await record(store, T0 + 5, sample=call(failure=True), want_stats=True)
    failed = Outcome(ok=False, latency_s=0.1, breaker_failure=True, error_class="timeout")
    moved = on_outcome(
        NAME, recorded.state, recorded.stats, failed, policy, T0 + 5, was_probe=False
    )
    assert moved == (None, ())  # five failures in the window before the reset: failure_rate


# The p95 shown ---------------------------------------------------------------------------


async def p95_after(store: StateStore, latencies: list[float]) -> float | None:
    for latency_ms in latencies:
        await record(store, sample=call(latency_ms=latency_ms))
    return (await store.summary(NAME, WINDOWS, T0)).p95_ms


async def test_the_p95_of_one_call_is_that_call_within_five_percent(store):
    assert await p95_after(store, [5300]) == pytest.approx(5300, rel=0.05)


async def test_the_p95_of_95_fast_calls_and_5_slow_ones_is_the_fast_calls(store):
    # Nearest rank: the 95th fastest of 100 calls.
    assert await p95_after(store, [100] * 95 + [3000] * 5) == pytest.approx(100, rel=0.05)


async def test_the_p95_of_calls_spread_evenly_to_a_second_is_near_950_ms(store):
    latencies = [1 + 999 * i / 99 for i in range(100)]
    assert await p95_after(store, latencies) == pytest.approx(950, rel=0.05)


def test_every_latency_from_1_ms_to_120_s_reads_back_within_five_percent():
    latency_ms, worst = 1.0, 0.0
    while latency_ms <= 120_000:
        shown = histogram.p95_ms({histogram.latency_bin(latency_ms): 1})
        assert shown is not None
        worst = max(worst, abs(shown - latency_ms) / latency_ms)
        latency_ms *= 1.0031
    assert worst < 0.05  # half a bin (√1.05 − 1 ≈ 2.5 %) and three significant figures


@pytest.mark.services
async def test_a_redis_bucket_keeps_only_the_bins_its_calls_fell_in(redis_store):
    for latency_ms in (100, 101, 5300):
        await record(redis_store, sample=call(latency_ms=latency_ms))
    client = redis.Redis.from_url(redis_url(), decode_responses=True)
    try:
        fields = client.hgetall(f"fo:{{{NAME}}}:b:{WINDOWS.bucket(T0)}")
    finally:
        client.close()
    bins = {name: count for name, count in fields.items() if name.startswith("l")}
    assert bins == {histogram.bin_field(histogram.latency_bin(100)): "2", "l176": "1"}
    assert histogram.latency_bin(5300) == 176


# What a record answers, and the status in one read -------------------------------------------


async def test_record_answers_every_spend_key_asked_and_added_after_the_increments(store):
    await store.seed_spend(OTHER_SPEND, 2.0, 3600)
    recorded = await record(
        store,
        sample=call(),
        spend=(SpendIncrement(SPEND, 0.25, 3600),),
        read_spend=(key for key in (SPEND, OTHER_SPEND, "spend:3:2023-11")),
    )
    assert recorded.spent == {
        SPEND: pytest.approx(0.25),
        OTHER_SPEND: pytest.approx(2.0),
        "spend:3:2023-11": 0.0,
    }
    recorded = await record(
        store,
        sample=call(),
        spend=(SpendIncrement(SPEND, 0.5, 3600), SpendIncrement(SPEND, 1.0, 3600)),
    )
    assert recorded.spent == {SPEND: pytest.approx(1.75)}
    assert (await record(store, sample=call())).spent == {}


async def test_record_answers_the_breaker_with_its_health_verdict_as_read_does(store):
    assert (await record(store, sample=call())).state.health == Health.UNKNOWN
    await checks(store, "000")
    recorded = await record(store, sample=call(failure=True))
    assert recorded.state.health == Health.DEGRADED
    assert recorded.state == (await store.read(NAME))[0]


async def test_status_read_answers_every_provider_and_spend_key_asked(store):
    await checks(store, "000")
    await record(store, sample=call(failure=True), spend=(SpendIncrement(SPEND, 0.5, 3600),))
    await record(store, sample=call(latency_ms=300))
    opened = BreakerState(state=State.OPEN, version=1, opened_at=T0, open_until=T0 + 60)
    assert await store.transition("openai-cloud", 0, opened)
    await store.record(
        RecordCall("openai-cloud", call(), now=T0 - 30, windows=WINDOWS, want_stats=False)
    )
    names = [NAME, "openai-cloud", "never-seen"]

    status = await store.status_read(
        names, windows=WINDOWS, now=T0, spend_keys=iter([SPEND, OTHER_SPEND])
    )
    assert status.breakers == {name: (await store.read(name))[0] for name in names}
    assert status.breakers[NAME].health == Health.DEGRADED
    assert status.breakers["never-seen"] == BreakerState()
    assert status.summaries == {name: await store.summary(name, WINDOWS, T0) for name in names}
    assert (status.summaries[NAME].calls, status.summaries[NAME].failures) == (2, 1)
    assert status.summaries["openai-cloud"].calls == 1
    assert status.spent == {SPEND: pytest.approx(0.5), OTHER_SPEND: 0.0}


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every write of one or more commands to Redis: each is a round trip."""
    return count_redis_writes(monkeypatch)


@pytest.mark.services
async def test_a_redis_record_with_spend_health_and_an_answer_is_one_round_trip(
    redis_store, round_trips
):
    await checks(redis_store, "000")
    await record(redis_store, sample=call())  # the script is loaded, the connection open
    round_trips.clear()
    recorded = await record(
        redis_store,
        sample=call(),
        spend=(SpendIncrement(SPEND, 0.25, 3600),),
        read_spend=[SPEND, OTHER_SPEND],
        cache=CacheWrite("cache:answer", "Paris", 60),
    )
    assert len(round_trips) == 1
    assert recorded.state.health == Health.DEGRADED
    assert recorded.spent == {SPEND: 0.25, OTHER_SPEND: 0.0}


@pytest.mark.services
async def test_a_redis_status_read_of_three_providers_is_one_round_trip(redis_store, round_trips):
    names = [NAME, "openai-cloud", "anthropic-cloud"]
    for name in names:
        await redis_store.record(
            RecordCall(name, call(), now=T0, windows=WINDOWS, want_stats=False)
        )
    await redis_store.status_read(names, windows=WINDOWS, now=T0)  # its script loaded
    round_trips.clear()
    status = await redis_store.status_read(names, windows=WINDOWS, now=T0, spend_keys=[SPEND])
    assert len(round_trips) == 1
    assert [status.summaries[name].calls for name in names] == [1, 1, 1]
