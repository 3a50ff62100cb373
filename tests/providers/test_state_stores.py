"""One contract, two stores: every test runs on MemoryStore (embedded) and on RedisStore against
the test Redis (services pass). Time is the `now` passed in; nothing sleeps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import redis
from django.conf import settings

from gateway.engine.breaker import BreakerState, Mode, State, WindowStats
from gateway.engine.health import Health, HealthState
from gateway.state.contract import RecordCall, Recorded, Sample, SpendIncrement, StateStore, Windows
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import ResilientStore

NAME = "ollama-local"
T0 = 1_700_000_000.0
WINDOWS = Windows(bucket_s=1, failure_window_s=60, p95_window_s=120)
SPEND = "spend:1:2023-11"
OTHER_SPEND = "spend:2:2023-11-14"


def redis_url() -> str:
    return settings.REDIS_URL or os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


def flush_redis(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()  # this db only: the services pass keeps its own (13)
    finally:
        client.close()


async def close_redis_store(store: RedisStore) -> None:
    for connection in list(store._clients.values()):
        if connection.pipe is not None:
            connection.pipe.close()
        await connection.redis.aclose()
    if store._sync_client is not None:
        store._sync_client.close()


# The contract's tests are about what the stores do, not how long a request may wait on Redis
# (SOCKET_TIMEOUT_S, tested where a store falls back): on a loaded machine a connection can take
# longer than that to open.
CONTRACT_SOCKET_TIMEOUT_S = 10.0


async def fresh_redis_store() -> AsyncIterator[RedisStore]:
    url = redis_url()
    flush_redis(url)
    store = RedisStore(url, socket_timeout_s=CONTRACT_SOCKET_TIMEOUT_S)
    yield store
    await close_redis_store(store)
    flush_redis(url)


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


def call(*, failure: bool = False, latency_ms: float = 100.0, slow: bool = False) -> Sample:
    return Sample(
        ok=not failure,
        failure=failure,
        slow=slow,
        over_p95=latency_ms > 5000,
        latency_ms=latency_ms,
    )


async def record(
    store: StateStore, now: float = T0, *, sample: Sample, want_stats: bool = False, **options
) -> Recorded:
    return await store.record(
        RecordCall(NAME, sample, now=now, windows=WINDOWS, want_stats=want_stats, **options)
    )


async def half_open(store: StateStore) -> BreakerState:
    """Open the breaker, then half-open it, as the router would: two compare-and-sets."""
    current, _ = await store.read(NAME)
    opened = BreakerState(
        state=State.OPEN,
        version=current.version + 1,
        opened_at=T0,
        open_until=T0 + 60,
        reopens=1,
        reason="consecutive_failures",
    )
    assert await store.transition(NAME, current.version, opened)
    half = BreakerState(
        state=State.HALF_OPEN,
        version=opened.version + 1,
        opened_at=T0,
        open_until=T0 + 60,
        half_opened_at=T0 + 60,
        reopens=1,
        reason="consecutive_failures",
    )
    assert await store.transition(NAME, opened.version, half)
    return half


async def test_a_fresh_breaker_reads_closed_at_version_zero_with_nothing_spent(store):
    state, spent = await store.read(NAME, (key for key in (SPEND, OTHER_SPEND)))
    assert state == BreakerState()
    assert (state.state, state.version) == (State.CLOSED, 0)
    assert spent == {SPEND: 0.0, OTHER_SPEND: 0.0}


async def test_record_counts_consecutive_failures_and_a_success_resets_them(store):
    counts = []
    for _ in range(3):
        recorded = await record(store, sample=call(failure=True))
        state, stats = recorded.state, recorded.stats
        counts.append(state.consecutive_failures)
        assert stats is None
    assert counts == [1, 2, 3]
    assert (await store.read(NAME))[0].consecutive_failures == 3

    state = (await record(store, sample=call())).state
    assert state.consecutive_failures == 0
    assert (await store.read(NAME))[0].consecutive_failures == 0


async def test_a_call_counted_while_in_flight_is_not_counted_again_when_it_ends(store):
    await record(store, sample=call(failure=True))  # counted stuck, as it waited
    ended = replace(call(latency_ms=9000), counted=False)  # then it answered after all
    recorded = await record(store, sample=ended, want_stats=True)
    # Neither a second call nor a success that would clear the stuck one.
    assert recorded.state.consecutive_failures == 1
    assert (recorded.stats.calls, recorded.stats.failures, recorded.stats.slow) == (1, 1, 0)
    summary = await store.summary(NAME, WINDOWS, T0)
    assert (summary.calls, summary.p95_ms) == (1, pytest.approx(100, rel=0.05))


@pytest.mark.services
async def test_a_not_counted_end_in_a_bucket_of_its_own_leaves_no_key_without_a_ttl(redis_store):
    # An operator's override moves the statistics' epoch, so the next bucket is made afresh.
    await redis_store.set_mode(NAME, Mode.FORCED_CLOSED)
    await redis_store.set_mode(NAME, Mode.AUTO)
    await record(redis_store, sample=replace(call(), counted=False))
    raw = redis.Redis.from_url(redis_url())
    try:
        assert all(raw.ttl(key) > 0 for key in raw.keys("*:b:*"))
        assert raw.keys("*:b:*")  # the bucket was made, and expires
    finally:
        raw.close()


async def test_window_sums_drop_buckets_older_than_the_window(store):
    stats = (await record(store, T0, sample=call(failure=True), want_stats=True)).stats
    assert stats == WindowStats(1, 1, 0, p95_calls=1, over_p95=0, p95_calls_recent=1)

    stats = (await record(store, T0 + 30, sample=call(slow=True), want_stats=True)).stats
    assert stats == WindowStats(2, 1, 1, p95_calls=2, over_p95=0, p95_calls_recent=2)

    # 61 s on, the first call has left the 60 s failure window but not the 120 s p95 window:
    # it is in the p95 window's earlier minute now.
    stats = (await record(store, T0 + 61, sample=call(latency_ms=6000), want_stats=True)).stats
    assert stats == WindowStats(2, 0, 1, 3, 1, p95_calls_recent=2, over_p95_recent=1)

    stats = (await record(store, T0 + 125, sample=call(), want_stats=True)).stats
    assert stats == WindowStats(1, 0, 0, 3, 1, p95_calls_recent=1, over_p95_recent=0)


async def test_transition_is_a_compare_and_set_on_the_version(store):
    opened = BreakerState(
        state=State.OPEN,
        version=1,
        opened_at=T0 + 0.25,
        open_until=T0 + 60.25,
        reopens=2,
        reason="failure_rate",
    )
    assert await store.transition(NAME, 0, opened) is True
    assert (await store.read(NAME))[0] == opened

    someone_else = BreakerState(state=State.HALF_OPEN, version=1, half_opened_at=T0 + 99)
    assert await store.transition(NAME, 0, someone_else) is False
    assert (await store.read(NAME))[0] == opened


async def test_acquire_probe_grants_exactly_the_limit_for_the_current_half_open_version(store):
    half = await half_open(store)
    grants = [await store.acquire_probe(NAME, half.version, 3) for _ in range(5)]
    assert grants == [True, True, True, False, False]
    assert (await store.read(NAME))[0].probes_admitted == 3


async def test_acquire_probe_grants_nothing_for_an_old_version(store):
    half = await half_open(store)
    assert await store.acquire_probe(NAME, half.version - 1, 3) is False
    assert await store.acquire_probe(NAME, half.version + 1, 3) is False
    assert (await store.read(NAME))[0].probes_admitted == 0


async def test_a_released_probe_slot_can_be_taken_again_at_that_version_only(store):
    half = await half_open(store)
    assert [await store.acquire_probe(NAME, half.version, 1) for _ in range(2)] == [True, False]
    await store.release_probe(NAME, half.version - 1)  # an old round's: nothing to give back
    assert await store.acquire_probe(NAME, half.version, 1) is False
    await store.release_probe(NAME, half.version)
    assert await store.acquire_probe(NAME, half.version, 1) is True
    await store.release_probe(NAME, half.version)
    await store.release_probe(NAME, half.version)  # never below zero
    state, _ = await store.read(NAME)
    assert state.probes_admitted == 0


async def test_acquire_probe_grants_nothing_on_a_closed_breaker(store):
    assert await store.acquire_probe(NAME, 0, 3) is False
    assert (await store.read(NAME))[0] == BreakerState()


async def test_fifty_concurrent_probe_requests_get_exactly_three_slots(store):
    half = await half_open(store)
    grants = await asyncio.gather(*(store.acquire_probe(NAME, half.version, 3) for _ in range(50)))
    assert grants.count(True) == 3
    assert (await store.read(NAME))[0].probes_admitted == 3


async def test_a_probe_success_counts_only_at_the_version_that_admitted_it(store):
    half = await half_open(store)
    state = (await record(store, sample=call(), probe_version=half.version)).state
    assert state.probes_succeeded == 1
    state = (await record(store, sample=call(), probe_version=half.version - 1)).state
    assert state.probes_succeeded == 1
    state = (await record(store, sample=call())).state  # not a probe
    assert state.probes_succeeded == 1
    state = (await record(store, sample=call(failure=True), probe_version=half.version)).state
    assert (state.probes_succeeded, state.consecutive_failures) == (1, 1)

    # A fresh half-open (a new version) doesn't count the old probes' successes.
    fresh = BreakerState(state=State.HALF_OPEN, version=half.version + 1, half_opened_at=T0 + 200)
    assert await store.transition(NAME, half.version, fresh)
    state = (await record(store, sample=call(), probe_version=half.version)).state
    assert state.probes_succeeded == 0
    state = (await record(store, sample=call(), probe_version=fresh.version)).state
    assert state.probes_succeeded == 1


async def test_spend_increments_accumulate_per_key(store):
    await record(store, sample=call(), spend=(SpendIncrement(SPEND, 0.25, 3600),))
    await record(
        store,
        sample=call(),
        spend=(SpendIncrement(SPEND, 0.5, 3600), SpendIncrement(OTHER_SPEND, 1.5, 600)),
    )
    _, spent = await store.read(NAME, [SPEND, OTHER_SPEND])
    assert spent == {SPEND: pytest.approx(0.75), OTHER_SPEND: pytest.approx(1.5)}


async def test_seed_spend_raises_a_counter_to_the_ledgers_figure_and_never_lowers_it(store):
    await store.seed_spend(SPEND, 4.0, 3600)  # missing: set
    await store.seed_spend(SPEND, 3.0, 3600)  # behind the live counter: kept
    await record(store, sample=call(), spend=(SpendIncrement(OTHER_SPEND, 2.0, 3600),))
    await store.seed_spend(OTHER_SPEND, 100.0, 3600)  # the counter lost spend: raised
    await record(store, sample=call(), spend=(SpendIncrement(SPEND, 1.0, 3600),))
    _, spent = await store.read(NAME, [SPEND, OTHER_SPEND])
    assert spent == {SPEND: pytest.approx(5.0), OTHER_SPEND: pytest.approx(100.0)}


async def test_set_mode_resets_to_closed_with_the_mode_and_a_higher_version(store):
    half = await half_open(store)
    await store.acquire_probe(NAME, half.version, 3)

    disabled = await store.set_mode(NAME, Mode.DISABLED)
    assert disabled == BreakerState(mode=Mode.DISABLED, version=half.version + 1)
    assert (await store.read(NAME))[0] == disabled

    auto = await store.set_mode(NAME, Mode.AUTO)
    assert auto == BreakerState(mode=Mode.AUTO, version=half.version + 2)
    assert (await store.read(NAME))[0] == auto


async def test_summary_gives_calls_failure_rate_and_a_p95_from_the_histogram(store):
    empty = await store.summary(NAME, WINDOWS, T0)
    assert (empty.calls, empty.failures, empty.failure_rate_pct, empty.p95_ms) == (0, 0, 0.0, None)

    for _ in range(19):
        await record(store, sample=call(latency_ms=80))
    await record(store, sample=call(failure=True, latency_ms=6000))
    summary = await store.summary(NAME, WINDOWS, T0)
    assert (summary.calls, summary.failures, summary.failure_rate_pct) == (20, 1, 5.0)
    assert summary.p95_ms == pytest.approx(80, rel=0.05)  # the 19th fastest of 20
    assert summary.calls_per_minute == 20.0

    await record(store, sample=call(failure=True, latency_ms=6000))
    summary = await store.summary(NAME, WINDOWS, T0)
    assert (summary.calls, summary.failures, summary.failure_rate_pct) == (21, 2, 9.5)
    assert summary.p95_ms == pytest.approx(6000, rel=0.05)  # the 20th of 21: a 6 s call


async def test_summary_forgets_calls_older_than_its_windows(store):
    await record(store, T0, sample=call(failure=True, latency_ms=6000))
    summary = await store.summary(NAME, WINDOWS, T0 + 90)
    assert (summary.calls, summary.failures) == (0, 0)
    assert summary.p95_ms == pytest.approx(6000, rel=0.05)  # still in the 120 s p95 window
    summary = await store.summary(NAME, WINDOWS, T0 + 200)
    assert (summary.calls, summary.p95_ms) == (0, None)


async def test_config_version_starts_at_zero_and_each_bump_moves_it(store):
    assert await store.config_version() == 0
    assert store.bump_config_version() == 1
    assert store.bump_config_version() == 2
    assert await store.config_version() == 2


# --- Redis only: many processes, one breaker ------------------------------------------------------


@pytest.fixture
async def second_redis_store(redis_store) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_store.url, socket_timeout_s=CONTRACT_SOCKET_TIMEOUT_S)
    yield store
    await close_redis_store(store)


@pytest.mark.services
async def test_two_redis_stores_on_one_url_share_one_breaker(redis_store, second_redis_store):
    one, other = redis_store, second_redis_store
    opened = BreakerState(state=State.OPEN, version=1, opened_at=T0, open_until=T0 + 60, reopens=1)
    assert await one.transition(NAME, 0, opened)
    assert (await other.read(NAME))[0] == opened
    assert await other.transition(NAME, 0, BreakerState(state=State.HALF_OPEN, version=1)) is False

    half = BreakerState(
        state=State.HALF_OPEN, version=2, opened_at=T0, open_until=T0 + 60, half_opened_at=T0 + 60
    )
    assert await other.transition(NAME, 1, half)
    grants = await asyncio.gather(
        *(s.acquire_probe(NAME, half.version, 3) for _ in range(25) for s in (one, other))
    )
    assert grants.count(True) == 3
    assert (await one.read(NAME))[0].probes_admitted == 3


async def test_calls_before_the_breaker_last_closed_no_longer_count(store):
    for second in range(5):
        await record(store, T0 + second, sample=call(failure=True))
    current, _ = await store.read(NAME)
    closed = BreakerState(state=State.CLOSED, version=current.version + 1, closed_at=T0 + 10)
    assert await store.transition(NAME, current.version, closed)
    stats = (await record(store, T0 + 12, sample=call(failure=True), want_stats=True)).stats
    assert stats == WindowStats(1, 1, 0, p95_calls=1, over_p95=0, p95_calls_recent=1)


async def test_a_probe_slot_notes_when_it_was_taken(store):
    half = await half_open(store)
    assert await store.acquire_probe(NAME, half.version, 3, T0 + 75)
    current, _ = await store.read(NAME)
    assert current.last_probe_at == T0 + 75 and current.probes_admitted == 1


# The sentinel's health window -------------------------------------------------------------

# The policy's defaults: a window of 5, 3 bad → degraded, degraded for 300 s → down.
WINDOW = {"window": 5, "degraded_after": 3, "down_after_s": 300}
EVERY_S = 30  # one check per sentinel interval


async def checks(store: StateStore, results: str, *, start: float = T0) -> HealthState:
    """Record one check per interval from `start`: "1" good, "0" bad, in order."""
    state = HealthState()
    for i, result in enumerate(results):
        ok = result == "1"
        state = await store.health_record(
            NAME, ok, now=start + i * EVERY_S, detail="" if ok else f"bad check {i}", **WINDOW
        )
    return state


async def test_a_provider_never_checked_is_unknown_and_reads_so_with_its_breaker(store):
    assert await store.health_read([NAME]) == {NAME: HealthState()}
    state, _ = await store.read(NAME)
    assert state.health == Health.UNKNOWN == "unknown"


async def test_two_bad_checks_of_five_leave_it_healthy(store):
    state = await checks(store, "01011")
    assert state.status == Health.HEALTHY
    assert state.window == (False, True, False, True, True)


async def test_three_bad_checks_of_five_make_it_degraded_since_the_third(store):
    state = await checks(store, "10100")
    assert state.status == Health.DEGRADED
    assert state.since == T0 + 4 * EVERY_S
    assert state.detail == "bad check 4" and state.checked_at == T0 + 4 * EVERY_S


async def test_degraded_for_down_after_s_makes_it_down(store):
    degraded = await checks(store, "000")
    assert degraded.status == Health.DEGRADED
    still = await store.health_record(NAME, False, now=degraded.since + 299, **WINDOW)
    assert still.status == Health.DEGRADED and still.since == degraded.since
    down = await store.health_record(NAME, False, now=degraded.since + 300, **WINDOW)
    assert down.status == Health.DOWN and down.since == degraded.since + 300


async def test_good_checks_after_down_keep_it_down_until_the_window_is_clean(store):
    await checks(store, "000")
    down = await store.health_record(NAME, False, now=T0 + 400, **WINDOW)
    assert down.status == Health.DOWN
    for i in range(1, 5):
        state = await store.health_record(NAME, True, now=T0 + 400 + i * EVERY_S, **WINDOW)
        assert state.status == Health.DOWN, f"healthy after only {i} good checks"
    healthy = await store.health_record(NAME, True, now=T0 + 550, **WINDOW)
    assert healthy.status == Health.HEALTHY and healthy.since == T0 + 550
    assert healthy.window == (True,) * 5


async def test_a_degraded_provider_stays_degraded_until_the_whole_window_is_clean(store):
    await checks(store, "000")
    state = await checks(store, "1111", start=T0 + 3 * EVERY_S)
    assert state.status == Health.DEGRADED  # one bad left in the window: no flapping back
    state = await checks(store, "1", start=T0 + 7 * EVERY_S)
    assert state.status == Health.HEALTHY


async def test_the_verdict_reads_with_the_breaker_and_breaker_writes_never_touch_it(store):
    await checks(store, "000")
    current, _ = await store.read(NAME, [SPEND])
    assert current.health == Health.DEGRADED
    opened = BreakerState(state=State.OPEN, version=1, opened_at=T0, open_until=T0 + 60)
    assert await store.transition(NAME, current.version, current)  # as read, health and all
    assert await store.transition(NAME, 1, opened)
    await store.set_mode(NAME, Mode.AUTO)
    await record(store, sample=call(failure=True))
    state, _ = await store.read(NAME)
    assert state.health == Health.DEGRADED
    assert (await store.health_read([NAME]))[NAME].status == Health.DEGRADED


async def test_health_read_answers_for_every_name_asked(store):
    await checks(store, "1")
    verdicts = await store.health_read([NAME, "openai-cloud"])
    assert verdicts[NAME].status == Health.HEALTHY and verdicts[NAME].window == (True,)
    assert verdicts["openai-cloud"] == HealthState()


async def test_a_verdict_with_a_ttl_lapses_to_unknown_when_no_check_follows():
    clock = MovableClock()
    store = MemoryStore(clock=clock)
    await store.health_record(NAME, False, now=T0, ttl_s=300, **WINDOW)
    clock.now += 299
    assert (await store.health_read([NAME]))[NAME].window == (False,)
    clock.now += 1
    assert (await store.health_read([NAME]))[NAME] == HealthState()


@pytest.mark.services
async def test_redis_keeps_the_verdict_only_for_its_ttl(redis_store):
    await redis_store.health_record(NAME, True, now=T0, ttl_s=300, **WINDOW)
    client = redis.Redis.from_url(redis_url())
    try:
        assert 299_000 < client.pttl(f"fo:{{{NAME}}}:health") <= 300_000
    finally:
        client.close()


@pytest.mark.services
async def test_a_redis_read_with_the_verdict_is_still_one_round_trip(redis_store, monkeypatch):
    await checks(redis_store, "000")
    sent: list[str] = []
    client = redis_store._client().redis
    original_pipeline = client.pipeline

    def counting_pipeline(*args, **kwargs):
        pipe = original_pipeline(*args, **kwargs)
        original_execute = pipe.execute

        async def execute(*a, **k):
            sent.append("pipeline")
            return await original_execute(*a, **k)

        pipe.execute = execute
        return pipe

    async def direct(*args, **kwargs):
        sent.append(str(args[0]))
        raise AssertionError("a command outside the pipeline")

    monkeypatch.setattr(client, "pipeline", counting_pipeline)
    monkeypatch.setattr(client, "execute_command", direct)
    state, spent = await redis_store.read(NAME, [SPEND])
    assert sent == ["pipeline"]
    assert state.health == Health.DEGRADED and spent == {SPEND: 0.0}


async def test_a_hundred_concurrent_records_all_land_in_the_window(store):
    await asyncio.gather(
        *(store.health_record(NAME, i % 2 == 0, now=T0 + i, **WINDOW) for i in range(100))
    )
    assert len((await store.health_read([NAME]))[NAME].window) == 5


# Locks and the sentinel's last run --------------------------------------------------------


async def test_try_lock_lets_one_caller_of_many_through(store):
    taken = await asyncio.gather(*(store.try_lock("sentinel", 30) for _ in range(20)))
    assert taken.count(True) == 1
    assert await store.try_lock("keepalive", 30)  # another key is another lock


async def test_a_lock_is_free_again_once_its_ttl_has_passed():
    clock = MovableClock()
    store = MemoryStore(clock=clock)
    assert await store.try_lock("sentinel", 27)
    clock.now += 26.9
    assert not await store.try_lock("sentinel", 27)
    clock.now += 0.1
    assert await store.try_lock("sentinel", 27)


@pytest.mark.services
async def test_a_redis_lock_expires_with_its_ttl(redis_store):
    assert await redis_store.try_lock("sentinel", 30)
    client = redis.Redis.from_url(redis_url())
    try:
        assert 29_000 < client.pttl("fo:lock:sentinel") <= 30_000
    finally:
        client.close()


async def test_the_sentinels_last_run_is_none_until_marked(store):
    assert await store.sentinel_last_run() is None
    await store.sentinel_mark_run(T0 + 0.25)
    assert await store.sentinel_last_run() == T0 + 0.25


async def test_with_redis_down_health_and_locks_go_on_in_local_state(closed_port):
    primary = RedisStore(f"redis://127.0.0.1:{closed_port}/0")
    store = ResilientStore(primary)
    try:
        state = await checks(store, "000")
        assert state.status == Health.DEGRADED
        assert (await store.read(NAME))[0].health == Health.DEGRADED
        assert await store.try_lock("sentinel", 30)
        assert not await store.try_lock("sentinel", 30)
        await store.sentinel_mark_run(T0)
        assert await store.sentinel_last_run() == T0
    finally:
        await close_redis_store(primary)


class MovableClock:
    """The memory store's expiry clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
