"""The Redis state store: one breaker per provider for every serving process on every machine.

Every write is one Lua script (or one command), so a transition, a probe slot or a counter is
atomic across processes. Keys carry the provider in a hash tag (`fo:{name}:…`), so a provider's
keys share a cluster slot. Cached answers are plain strings under `fo:<key>`; a call's answer is
written by the record script itself, which a call runs anyway: caching costs no round trip (a
script in a redis-py pipeline would: it sends SCRIPT EXISTS before every execute). The same
script answers what the next admission would read (the breaker with its health verdict and the
spend counters), so a request that succeeds costs one round trip; the status page reads every
provider's breaker, verdict and buckets in one pipeline (`status_read`). If Redis stops
answering, `ResilientStore` (`resilient_store`) routes on local state until it is back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import redis
import redis.asyncio as aioredis

from gateway.engine.breaker import BreakerState, Mode, WindowStats
from gateway.engine.budgets import Hold
from gateway.engine.health import Health, HealthState
from gateway.engine.rate import Limits, RateKeys
from gateway.state import redis_scripts as scripts
from gateway.state.contract import (
    RecordCall,
    Recorded,
    Reserved,
    StateStore,
    StatusRead,
    Windows,
    WindowSummary,
    summarize,
)
from gateway.state.record_script import ScriptCall
from gateway.state.redis_connection import Connection
from gateway.state.refusal_log import (
    REFUSALS_KEPT,
    REFUSALS_KEY,
    RefusalNote,
    note_decoded,
    note_encoded,
)
from gateway.state.script_pipe import ScriptPipe

logger = logging.getLogger(__name__)

# A request must not wait long on bookkeeping: past this, Redis counts as down for the request.
SOCKET_TIMEOUT_S = 0.5
# Connections per event loop for the commands that don't go through the pipe: redis-py's
# default of 100 is met by a burst of a hundred requests (each refused one notes its refusal),
# and a command past it fails as if Redis were down. (A pool that waits for a connection
# instead wraps the wait in a timeout that can swallow a task's cancellation.)
POOL_SIZE = 1000


class RedisStore(StateStore):
    backend = "redis"

    def __init__(self, url: str, *, socket_timeout_s: float | None = None) -> None:
        self.url = url
        self.socket_timeout_s = SOCKET_TIMEOUT_S if socket_timeout_s is None else socket_timeout_s
        # An asyncio client belongs to the event loop it was made on: one per loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connection] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_client: redis.Redis | None = None

    def _client(self) -> Connection:
        loop = asyncio.get_running_loop()
        connection = self._clients.get(loop)
        if connection is None:
            client = aioredis.Redis.from_url(
                self.url,
                decode_responses=True,
                socket_connect_timeout=self.socket_timeout_s,
                socket_timeout=self.socket_timeout_s,
                max_connections=POOL_SIZE,
            )
            pipe = (
                ScriptPipe(self.url, timeout_s=self.socket_timeout_s)
                if ScriptPipe.usable(self.url)
                else None
            )
            connection = self._clients[loop] = Connection.on(client, pipe)
        return connection

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        connection = self._clients.pop(loop, None)
        if connection is not None:
            if connection.pipe is not None:
                connection.pipe.close()
            await connection.redis.aclose()

    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        client = self._client().redis
        spend_keys = tuple(spend_keys)  # iterated twice below: a generator would come back empty
        keys = [f"fo:{key}" for key in spend_keys]
        async with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(scripts.breaker_key(name))
            pipe.hget(scripts.health_key(name), "status")
            if keys:
                pipe.mget(keys)
            results = await pipe.execute()
        spent = dict(zip(spend_keys, results[2], strict=True)) if keys else {}
        state = scripts.state_from_hash(results[0])
        if results[1]:
            state = replace(state, health=Health(results[1]))
        return state, {k: float(v or 0) for k, v in spent.items()}

    async def record(self, call: RecordCall) -> Recorded:
        script = ScriptCall.of(call)
        raw_state, raw_stats, raw_spent, status, taken, slot = await _recorded(
            self._client(), script
        )
        stats = WindowStats(*(int(v) for v in raw_stats)) if raw_stats else None
        state = scripts.state_from_hash(raw_state)
        if status:
            state = replace(state, health=Health(status))
        # An increment of a key named twice: the later value is the one after both.
        spent = {key: float(value) for key, value in zip(script.spend_keys, raw_spent, strict=True)}
        return Recorded(state, stats, spent, bool(taken), bool(slot))

    async def transition(self, name: str, expected_version: int, new: BreakerState) -> bool:
        new_pairs = scripts.state_to_pairs(_with_version(new, expected_version + 1))
        moved = await self._client().transition(
            keys=[scripts.breaker_key(name)], args=[expected_version, *new_pairs]
        )
        return bool(moved)

    async def acquire_probe(
        self, name: str, version: int, limit: int, now: float | None = None
    ) -> bool:
        args = [version, limit, "" if now is None else repr(now)]
        return bool(await self._client().acquire_probe(keys=[scripts.breaker_key(name)], args=args))

    async def release_probe(self, name: str, version: int) -> None:
        await self._client().release_probe(keys=[scripts.breaker_key(name)], args=[version])

    async def set_mode(self, name: str, mode: Mode) -> BreakerState:
        version = await self._client().set_mode(keys=[scripts.breaker_key(name)], args=[mode.value])
        return BreakerState(mode=mode, version=int(version))

    async def status_read(
        self,
        names: Sequence[str],
        *,
        windows: Windows,
        now: float,
        spend_keys: Iterable[str] = (),
    ) -> StatusRead:
        """One pipeline: per provider its breaker hash, health status and every bucket of the
        longer window, then the spend counters."""
        names, spend_keys = tuple(names), tuple(spend_keys)
        index = windows.bucket(now)
        span = windows.buckets_in(max(windows.failure_window_s, windows.p95_window_s))
        async with self._client().redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(scripts.breaker_key(name))
                pipe.hget(scripts.health_key(name), "status")
                for i in range(span):
                    pipe.hgetall(f"{scripts.bucket_prefix(name)}{index - i}")
            if spend_keys:
                pipe.mget([f"fo:{key}" for key in spend_keys])
            results = await pipe.execute()
        breakers: dict[str, BreakerState] = {}
        summaries: dict[str, WindowSummary] = {}
        per_name = 2 + span
        for n, name in enumerate(names):
            raw_state, status, *raw_buckets = results[n * per_name : (n + 1) * per_name]
            state = scripts.state_from_hash(raw_state)
            breakers[name] = replace(state, health=Health(status)) if status else state
            epoch = scripts.epoch_of(raw_state)
            buckets = (
                (index - i, scripts.bucket_counts(raw, epoch)) for i, raw in enumerate(raw_buckets)
            )
            summaries[name] = summarize(buckets, windows, now)
        raw_spent = results[-1] if spend_keys else []
        spent = {key: float(v or 0) for key, v in zip(spend_keys, raw_spent, strict=True)}
        return StatusRead(breakers, summaries, spent)

    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        await self._client().seed_spend(keys=[f"fo:{key}"], args=[repr(amount), ttl_s])

    async def reserve(
        self, holder: str, holds: Sequence[Hold], *, now: float, life_s: float
    ) -> Reserved:
        if not holds:
            return Reserved("", {}, {})
        keys: list[str] = []
        args: list[Any] = [holder, repr(life_s)]
        for hold in holds:
            keys += [f"fo:{hold.key}", *scripts.hold_keys(hold.key)]
            ttl = max(hold.ttl_s, math.ceil(life_s) + 60)
            args += [repr(hold.amount), repr(hold.limit), repr(min(hold.level, 1e300)), ttl]
        refusal, spent, held = await self._client().reserve(keys=keys, args=args)
        names = [hold.key for hold in holds]
        return Reserved(
            refusal,
            {key: float(value) for key, value in zip(names, spent, strict=True)},
            {key: float(value) for key, value in zip(names, held, strict=True)},
        )

    async def release(self, holder: str, keys: Iterable[str]) -> None:
        async with self._client().redis.pipeline(transaction=False) as pipe:
            for counter in keys:
                holds, expiries = scripts.hold_keys(counter)
                pipe.hdel(holds, holder)
                pipe.zrem(expiries, holder)
            await pipe.execute()

    async def holds_read(self, keys: Iterable[str], *, now: float) -> dict[str, tuple[int, float]]:
        names = tuple(keys)
        if not names:
            return {}
        redis_keys = [key for counter in names for key in scripts.hold_keys(counter)]
        rows = await self._client().holds_read(keys=redis_keys)
        return {
            counter: (int(count), float(total))
            for counter, (count, total) in zip(names, rows, strict=True)
        }

    async def rate_take(
        self,
        keys: RateKeys,
        limits: Limits,
        *,
        ttl_s: int,
        check: bool = True,
        amount: int = 1,
    ) -> tuple[bool, dict[str, float]]:
        connection = self._client()
        ok, *values = await _scripted(
            connection,
            connection.rate_take,
            [f"fo:{key}" for key in keys.all],
            [
                repr(keys.weight),
                limits.requests_per_minute,
                limits.tokens_per_minute,
                ttl_s,
                int(check),
                amount,
            ],
        )
        return bool(ok), {key: float(value) for key, value in zip(keys.all, values, strict=True)}

    async def cache_get(self, key: str) -> str | None:
        value: str | None = await self._client().redis.get(f"fo:{key}")
        return value

    async def cache_put(self, key: str, value: str, ttl_s: int) -> None:
        if ttl_s >= 1:
            await self._client().redis.set(f"fo:{key}", value, ex=ttl_s)

    async def health_record(
        self,
        name: str,
        ok: bool,
        *,
        now: float,
        window: int,
        degraded_after: int,
        down_after_s: float,
        detail: str = "",
        ttl_s: float | None = None,
        loading_grace_s: float = 0.0,
    ) -> HealthState:
        args = [
            int(ok),
            repr(float(now)),
            max(1, window),
            degraded_after,
            repr(float(down_after_s)),
            detail,
            0 if ttl_s is None else max(1, round(ttl_s * 1000)),
            repr(float(loading_grace_s)),
        ]
        raw = await self._client().health_record(keys=[scripts.health_key(name)], args=args)
        return scripts.health_from_hash(raw)

    async def health_read(self, names: Iterable[str]) -> dict[str, HealthState]:
        names = tuple(names)
        client = self._client().redis
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(scripts.health_key(name))
            raws = await pipe.execute()
        return {name: scripts.health_from_hash(raw) for name, raw in zip(names, raws, strict=True)}

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        taken = await self._client().redis.set(
            f"fo:lock:{key}", "1", nx=True, px=max(1, round(ttl_s * 1000))
        )
        return bool(taken)

    async def sentinel_mark_run(self, at: float) -> None:
        await self._client().redis.set(scripts.SENTINEL_LAST_RUN_KEY, repr(float(at)))

    async def sentinel_last_run(self) -> float | None:
        value = await self._client().redis.get(scripts.SENTINEL_LAST_RUN_KEY)
        return None if value is None else float(value)

    async def refusal_add(self, note: RefusalNote) -> None:
        async with self._client().redis.pipeline(transaction=True) as pipe:
            pipe.lpush(REFUSALS_KEY, note_encoded(note))
            pipe.ltrim(REFUSALS_KEY, 0, REFUSALS_KEPT - 1)
            await pipe.execute()

    async def refusals_read(self, count: int = REFUSALS_KEPT) -> list[RefusalNote]:
        if count <= 0:
            return []
        raws = await self._client().redis.lrange(REFUSALS_KEY, 0, count - 1)
        return [note for note in map(note_decoded, raws) if note is not None]

    async def config_version(self) -> int:
        return int(await self._client().redis.get(scripts.VERSION_KEY) or 0)

    async def bump_config_version_async(self) -> int:
        return int(await self._client().redis.incr(scripts.VERSION_KEY))

    def bump_config_version(self) -> int:
        if self._sync_client is None:
            self._sync_client = redis.Redis.from_url(
                self.url, socket_connect_timeout=2, socket_timeout=2
            )
        return int(self._sync_client.incr(scripts.VERSION_KEY))

    def close_sync(self) -> None:
        """Release the admin's connection (`bump_config_version`), for a store made for one."""
        if self._sync_client is not None:
            self._sync_client.close()
            self._sync_client = None


def _with_version(state: BreakerState, version: int) -> BreakerState:
    return replace(state, version=version)


async def _recorded(connection: Connection, script: ScriptCall) -> Any:
    return await _scripted(connection, connection.record, script.keys, script.args)


async def _scripted(connection: Connection, script: Any, keys: list[str], args: list[Any]) -> Any:
    """A script's reply: through the pipe where there is one (a request's own calls: the record,
    the rate check); through redis-py's script object where there is none, or where Redis
    doesn't have the script (NOSCRIPT, after a restart or a SCRIPT FLUSH), which loads it for
    the calls after."""
    if connection.pipe is not None:
        try:
            return await connection.pipe.evalsha(script.sha, keys, args)
        except redis.ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
    return await script(keys=keys, args=args)
