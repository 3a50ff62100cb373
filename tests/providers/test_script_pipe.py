"""The record script's own pipelined connection (`gateway.state.script_pipe`), against the test
Redis: replies reach their callers in order, a lost connection is an error Redis's fallback
catches and the next call connects afresh, a script Redis no longer has is loaded again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from gateway.state.contract import RecordCall
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import REDIS_ERRORS
from gateway.state.script_pipe import ScriptPipe
from tests.providers.test_state_stores import (
    T0,
    WINDOWS,
    call,
    close_redis_store,
    flush_redis,
    redis_url,
)

pytestmark = pytest.mark.services


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    url = redis_url()
    flush_redis(url)
    store = RedisStore(url, socket_timeout_s=10.0)
    yield store
    await close_redis_store(store)
    flush_redis(url)


async def _record(store: RedisStore, name: str, *, failure: bool = False):
    sample = call(failure=failure)
    return await store.record(RecordCall(name, sample, now=T0, windows=WINDOWS, want_stats=True))


def test_only_a_plain_tcp_url_is_piped():
    assert ScriptPipe.usable("redis://127.0.0.1:6379/3")
    assert ScriptPipe.usable("redis://user:secret@cache.internal:6380/0")
    assert not ScriptPipe.usable("rediss://cache.internal:6380/0")
    assert not ScriptPipe.usable("unix:///run/redis.sock?db=2")


async def test_concurrent_calls_each_get_their_own_reply(store):
    """Forty providers, each with its own count of failures, recorded all at once on the one
    connection: every caller reads back its own provider's window."""
    names = [f"provider-{i}" for i in range(40)]
    for index, name in enumerate(names):
        for _ in range(index % 5):
            await _record(store, name, failure=True)
    replies = await asyncio.gather(*(_record(store, name) for name in names))
    assert [r.stats.failures for r in replies] == [i % 5 for i in range(len(names))]
    assert [r.stats.calls for r in replies] == [i % 5 + 1 for i in range(len(names))]
    assert store._client().pipe is not None  # they went through the pipe


async def test_the_calls_land_in_the_urls_db(store):
    await _record(store, "ollama-local", failure=True)
    keys = redis.Redis.from_url(redis_url()).keys("fo:{ollama-local}:*")
    assert b"fo:{ollama-local}:breaker" in keys


async def test_a_connection_redis_dropped_is_replaced_by_the_call_that_finds_it(store):
    await _record(store, "ollama-local")
    address = store._client().pipe.local_address
    assert address is not None
    # Only this connection: the other workers' share the server.
    assert redis.Redis.from_url(redis_url()).client_kill(address)
    assert [(await _record(store, "ollama-local")).stats.calls for _ in range(3)] == [2, 3, 4]
    assert store._client().pipe.local_address != address


async def test_redis_gone_is_an_error_the_fallback_catches():
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout_s=2.0)  # nothing listens there
    with pytest.raises(REDIS_ERRORS):
        await _record(store, "ollama-local")
    await close_redis_store(store)


async def test_a_caller_that_gives_up_leaves_the_others_their_replies(store):
    """A call cancelled while its reply is on the way: the calls after it get their own
    replies, never the cancelled one's."""
    await _record(store, "a")
    slow = asyncio.ensure_future(_record(store, "a", failure=True))
    await asyncio.sleep(0)  # written, not yet answered
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    replies = [await _record(store, name) for name in ("b", "b", "c")]
    assert [r.stats.calls for r in replies] == [1, 2, 1]


async def test_a_script_redis_no_longer_has_is_loaded_again(store):
    await _record(store, "ollama-local")
    redis.Redis.from_url(redis_url()).script_flush()
    recorded = await _record(store, "ollama-local")
    assert recorded.stats.calls == 2
    assert (await _record(store, "ollama-local")).stats.calls == 3


async def test_the_commands_of_one_turn_of_the_loop_go_out_in_one_write(store, monkeypatch):
    from gateway.state.script_pipe import Wire

    await _record(store, "warm")  # connected, the script loaded
    writes: list[int] = []
    write = Wire._write

    def counted(self):
        writes.append(len(self._outgoing))
        write(self)

    monkeypatch.setattr(Wire, "_write", counted)
    replies = await asyncio.gather(*(_record(store, f"provider-{i}") for i in range(10)))
    assert writes == [10]
    assert [r.stats.calls for r in replies] == [1] * 10
