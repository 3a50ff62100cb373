"""The answer cache's storage: one contract on MemoryStore (embedded) and RedisStore (services
pass). Memory expiry runs on a clock the test moves; Redis's is read back as the key's TTL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from gateway.state.contract import CacheWrite, SpendIncrement, StateStore
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from tests.providers.conftest import count_redis_writes
from tests.providers.test_state_stores import (
    NAME,
    SPEND,
    T0,
    WINDOWS,
    call,
    fresh_redis_store,
    record,
    redis_url,
)

KEY = "cache:" + "ab" * 32
OTHER_KEY = "cache:" + "cd" * 32
ANSWER = '{"text": "Paris", "provider": "ollama-local"}'


class Clock:
    """The memory cache's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(
    params=[
        pytest.param("memory"),
        pytest.param("redis", marks=pytest.mark.services),
    ]
)
async def store(request: pytest.FixtureRequest, clock: Clock) -> AsyncIterator[StateStore]:
    if request.param == "memory":
        yield MemoryStore(clock=clock)
        return
    async for redis_store in fresh_redis_store():
        yield redis_store


@pytest.fixture
def raw_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url(), decode_responses=True)
    yield client
    client.close()


def small_store(clock: Clock, *, entries: int = 10_000, size: int = 64 * 2**20) -> MemoryStore:
    return MemoryStore(cache_max_entries=entries, cache_max_bytes=size, clock=clock)


async def cached(store: StateStore, *keys: str) -> list[str | None]:
    return [await store.cache_get(key) for key in keys]


# --- Both stores ----------------------------------------------------------------------------------


async def test_a_cached_answer_reads_back_as_it_was_put(store):
    await store.cache_put(KEY, ANSWER, 60)
    assert await store.cache_get(KEY) == ANSWER


async def test_a_key_never_put_reads_none(store):
    await store.cache_put(KEY, ANSWER, 60)
    assert await store.cache_get(OTHER_KEY) is None


async def test_putting_a_key_again_replaces_its_answer(store):
    await store.cache_put(KEY, ANSWER, 60)
    await store.cache_put(KEY, '{"text": "Lyon"}', 60)
    assert await store.cache_get(KEY) == '{"text": "Lyon"}'


async def test_unicode_answers_survive_the_round_trip(store):
    answer = '{"text": "Zürich — 東京 🚄 Ωμέγα"}'
    await store.cache_put(KEY, answer, 60)
    assert await store.cache_get(KEY) == answer


async def test_a_ttl_under_one_second_keeps_nothing(store):
    await store.cache_put(KEY, ANSWER, 0)
    await record(store, sample=call(), cache=CacheWrite(OTHER_KEY, ANSWER, 0))
    assert await cached(store, KEY, OTHER_KEY) == [None, None]


async def test_record_with_a_cache_write_keeps_the_answer_and_still_counts_the_call(store):
    await record(store, sample=call(failure=True))
    recorded = await record(
        store,
        sample=call(slow=True),
        want_stats=True,
        spend=(SpendIncrement(SPEND, 0.25, 3600),),
        cache=CacheWrite(KEY, ANSWER, 60),
    )
    assert await store.cache_get(KEY) == ANSWER
    assert recorded.state.consecutive_failures == 0
    assert recorded.stats is not None
    assert (recorded.stats.calls, recorded.stats.failures, recorded.stats.slow) == (2, 1, 1)
    assert recorded.spent == {SPEND: pytest.approx(0.25)}
    assert (await store.read(NAME, [SPEND]))[1] == {SPEND: pytest.approx(0.25)}
    summary = await store.summary(NAME, WINDOWS, T0)
    assert (summary.calls, summary.failures) == (2, 1)


async def test_record_without_a_cache_write_caches_nothing(store):
    await record(store, sample=call())
    assert await store.cache_get(KEY) is None


# --- Memory: expiry on the injected clock, and the size limits ------------------------------------


async def test_a_memory_entry_expires_after_its_ttl_on_the_stores_clock(clock):
    store = small_store(clock)
    await store.cache_put(KEY, ANSWER, 60)
    clock.now += 59.9
    assert await store.cache_get(KEY) == ANSWER
    clock.now += 0.1
    assert await store.cache_get(KEY) is None


async def test_reading_an_expired_entry_deletes_it_and_frees_its_slot(clock):
    store = small_store(clock, entries=2)
    await store.cache_put(KEY, ANSWER, 10)
    await store.cache_put(OTHER_KEY, ANSWER, 100)
    await store.cache_get(KEY)  # KEY is now the most recent, OTHER_KEY the least
    clock.now += 10
    assert await store.cache_get(KEY) is None
    await store.cache_put("cache:third", ANSWER, 100)
    # Had the expired entry stayed, OTHER_KEY would have been evicted to make room.
    assert await cached(store, OTHER_KEY, "cache:third") == [ANSWER, ANSWER]


async def test_a_cache_write_in_record_expires_on_the_stores_clock_too(clock):
    store = small_store(clock)
    await record(store, sample=call(), cache=CacheWrite(KEY, ANSWER, 30))
    clock.now += 30
    assert await store.cache_get(KEY) is None


async def test_past_the_entry_limit_the_least_recently_used_entry_goes(clock):
    store = small_store(clock, entries=3)
    for key in ("a", "b", "c"):
        await store.cache_put(key, ANSWER, 60)
    await store.cache_get("a")  # a read makes "a" the most recent: "b" is now the oldest
    await store.cache_put("d", ANSWER, 60)
    assert await cached(store, "a", "b", "c", "d") == [ANSWER, None, ANSWER, ANSWER]


async def test_past_the_byte_limit_least_recently_used_entries_go_counting_utf8_bytes(clock):
    store = small_store(clock, size=10)
    await store.cache_put("a", "aaaa", 60)
    await store.cache_put("b", "bbbb", 60)
    await store.cache_put("c", "éé", 60)  # 2 characters, 4 bytes: 12 bytes in all
    assert await cached(store, "a", "b", "c") == [None, "bbbb", "éé"]


async def test_replacing_an_entry_counts_only_its_new_size(clock):
    store = small_store(clock, size=10)
    await store.cache_put("a", "aaaaaaaa", 60)
    await store.cache_put("a", "aa", 60)
    await store.cache_put("b", "bbbbbbbb", 60)
    assert await cached(store, "a", "b") == ["aa", "bbbbbbbb"]


async def test_an_answer_larger_than_the_byte_limit_is_not_kept_and_evicts_nothing(clock):
    store = small_store(clock, size=10)
    await store.cache_put("a", "aaaa", 60)
    await store.cache_put("big", "x" * 11, 60)
    assert await cached(store, "a", "big") == ["aaaa", None]


# --- Redis: the keys as another process sees them -------------------------------------------------


@pytest.fixture
async def redis_store() -> AsyncIterator[RedisStore]:
    async for store in fresh_redis_store():
        yield store


@pytest.mark.services
async def test_redis_keeps_an_answer_under_the_fo_prefix_with_its_ttl(redis_store, raw_redis):
    await redis_store.cache_put(KEY, ANSWER, 1)
    assert raw_redis.get(f"fo:{KEY}") == ANSWER
    assert 0 < raw_redis.pttl(f"fo:{KEY}") <= 1000


@pytest.mark.services
async def test_redis_record_writes_the_answer_with_its_ttl(redis_store, raw_redis):
    await record(
        redis_store,
        sample=call(),
        spend=(SpendIncrement(SPEND, 0.5, 3600),),
        cache=CacheWrite(KEY, ANSWER, 1),
    )
    assert raw_redis.get(f"fo:{KEY}") == ANSWER
    assert 0 < raw_redis.pttl(f"fo:{KEY}") <= 1000
    assert float(raw_redis.get(f"fo:{SPEND}")) == 0.5


@pytest.mark.services
async def test_an_answer_expired_in_redis_reads_none(redis_store, raw_redis):
    await redis_store.cache_put(KEY, ANSWER, 60)
    raw_redis.expire(f"fo:{KEY}", 0)  # its deadline reached, without waiting for it
    assert await redis_store.cache_get(KEY) is None


@pytest.mark.services
async def test_redis_record_with_a_cache_write_takes_one_round_trip(redis_store, monkeypatch):
    await record(redis_store, sample=call())  # loads the script: later calls run it by sha
    sent = count_redis_writes(monkeypatch)
    await record(redis_store, sample=call(), cache=CacheWrite(KEY, ANSWER, 60))
    assert len(sent) == 1
