"""The Redis state store: one breaker per provider for every serving process on every machine.

Every write is one Lua script (or one command), so a transition, a probe slot or a counter is
atomic across processes. Keys carry the provider in a hash tag (`fo:{name}:…`), so a provider's
keys share a cluster slot. Cached answers are plain strings under `fo:<key>`; a call's answer is
written by the record script itself, which a call runs anyway: caching costs no round trip (a
script in a redis-py pipeline would: it sends SCRIPT EXISTS before every execute). If Redis
stops answering, `ResilientStore` (`state_resilient`) routes on local state until it is back.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable
from dataclasses import fields, replace
from typing import Any

import redis
import redis.asyncio as aioredis

from .breaker import BreakerState, Mode, State, WindowStats
from .health import Health, HealthState
from .state import (
    BIN_COUNT,
    CacheWrite,
    Sample,
    SpendIncrement,
    StateStore,
    Windows,
    WindowSummary,
    latency_bin,
    summarize,
)

logger = logging.getLogger(__name__)

# A request must not wait long on bookkeeping: past this, Redis counts as down for the request.
SOCKET_TIMEOUT_S = 0.5
VERSION_KEY = "fo:config:version"
SENTINEL_LAST_RUN_KEY = "fo:sentinel:last_run"

_RECORD = """
local b, bk = KEYS[1], KEYS[2]
redis.call('HINCRBY', bk, 'c', 1)
if ARGV[1] == '1' then redis.call('HINCRBY', bk, 'f', 1) end
if ARGV[3] == '1' then redis.call('HINCRBY', bk, 's', 1) end
if ARGV[4] == '1' then redis.call('HINCRBY', bk, 'p', 1) end
redis.call('HINCRBY', bk, 'h' .. ARGV[5], 1)
redis.call('EXPIRE', bk, tonumber(ARGV[6]))
if ARGV[1] == '1' then
  redis.call('HINCRBY', b, 'consecutive_failures', 1)
elseif ARGV[2] == '1' then
  redis.call('HSET', b, 'consecutive_failures', 0)
  local pv = tonumber(ARGV[7])
  if pv >= 0 then
    local st = redis.call('HMGET', b, 'version', 'state')
    if tonumber(st[1] or '0') == pv and st[2] == 'half_open' then
      redis.call('HINCRBY', b, 'probes_succeeded', 1)
    end
  end
end
local last_spend = #KEYS
if ARGV[14] ~= '0' then
  -- the call's answer, cached with its counting: the last key is the cache entry's
  redis.call('SET', KEYS[#KEYS], ARGV[15], 'EX', tonumber(ARGV[14]))
  last_spend = #KEYS - 1
end
for i = 3, last_spend do
  local a = 16 + (i - 3) * 2
  redis.call('INCRBYFLOAT', KEYS[i], ARGV[a])
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[a + 1]))
end
local stats = {}
if ARGV[8] == '1' then
  local idx, fw, pw = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
  -- only calls after the breaker last closed count toward tripping it again
  local closed_at = tonumber(redis.call('HGET', b, 'closed_at') or '0')
  local closed = math.floor(closed_at / tonumber(ARGV[13]))
  fw = math.max(0, math.min(fw, idx - closed))
  pw = math.max(0, math.min(pw, idx - closed))
  local c, f, s, pc, p = 0, 0, 0, 0, 0
  for i = 0, math.max(fw, pw) - 1 do
    local v = redis.call('HMGET', ARGV[9] .. (idx - i), 'c', 'f', 's', 'p')
    local vc = tonumber(v[1] or '0')
    if i < fw then
      c = c + vc
      f = f + tonumber(v[2] or '0')
      s = s + tonumber(v[3] or '0')
    end
    if i < pw then
      pc = pc + vc
      p = p + tonumber(v[4] or '0')
    end
  end
  stats = {c, f, s, pc, p}
end
return {redis.call('HGETALL', b), stats}
"""

_TRANSITION = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""

_ACQUIRE_PROBE = """
local st = redis.call('HMGET', KEYS[1], 'version', 'state', 'probes_admitted')
if tonumber(st[1] or '0') ~= tonumber(ARGV[1]) or st[2] ~= 'half_open' then return 0 end
if tonumber(st[3] or '0') >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'probes_admitted', 1)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'last_probe_at', ARGV[3]) end
return 1
"""

_RELEASE_PROBE = """
local st = redis.call('HMGET', KEYS[1], 'version', 'state', 'probes_admitted')
if tonumber(st[1] or '0') ~= tonumber(ARGV[1]) or st[2] ~= 'half_open' then return 0 end
if tonumber(st[3] or '0') <= 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'probes_admitted', -1)
return 1
"""

_SET_MODE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0') + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'mode', ARGV[1], 'state', 'closed', 'version', v)
return v
"""

_SEED_SPEND = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
end
return 1
"""

# `health.next_health` in Lua (change both): the window is a string of 1s and 0s, newest last;
# `since` is kept as the caller's own text, so a float never goes through Lua's formatting.
_HEALTH_RECORD = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'since', 'window')
local status, since = cur[1] or 'unknown', cur[2] or '0'
local n = tonumber(ARGV[3])
local win = (cur[3] or '') .. ARGV[1]
if #win > n then win = string.sub(win, #win - n + 1) end
local bad = 0
for i = 1, #win do
  if string.sub(win, i, i) == '0' then bad = bad + 1 end
end
local clean = #win >= n and bad == 0
local new = status
if status == 'degraded' then
  if clean then
    new = 'healthy'
  elseif tonumber(ARGV[2]) - tonumber(since) >= tonumber(ARGV[5]) then
    new = 'down'
  end
elseif status == 'down' then
  if clean then new = 'healthy' end
elseif bad >= tonumber(ARGV[4]) then
  new = 'degraded'
else
  new = 'healthy'
end
if new ~= status then since = ARGV[2] end
redis.call('HSET', KEYS[1], 'status', new, 'since', since, 'window', win,
           'detail', ARGV[6], 'checked_at', ARGV[2])
if tonumber(ARGV[7]) > 0 then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
else
  redis.call('PERSIST', KEYS[1])
end
return {'status', new, 'since', since, 'window', win, 'detail', ARGV[6], 'checked_at', ARGV[2]}
"""

_INT_FIELDS = {"version", "consecutive_failures", "reopens", "probes_admitted", "probes_succeeded"}
_FLOAT_FIELDS = {"opened_at", "open_until", "half_opened_at", "last_probe_at", "closed_at"}


def _breaker_key(name: str) -> str:
    return f"fo:{{{name}}}:breaker"


def _bucket_prefix(name: str) -> str:
    return f"fo:{{{name}}}:b:"


def _health_key(name: str) -> str:
    return f"fo:{{{name}}}:health"


def _health_from_hash(raw: dict[str, str] | list[str]) -> HealthState:
    if isinstance(raw, list):  # a script answers a flat list
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    if not raw:
        return HealthState()
    return HealthState(
        status=Health(raw.get("status", Health.UNKNOWN)),
        since=float(raw.get("since") or 0),
        window=tuple(c == "1" for c in raw.get("window", "")),
        detail=raw.get("detail", ""),
        checked_at=float(raw.get("checked_at") or 0),
    )


def _state_from_hash(raw: dict[str, str] | list[str]) -> BreakerState:
    if isinstance(raw, list):  # HGETALL inside a script answers a flat list
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _INT_FIELDS:
            values[key] = int(value)
        elif key in _FLOAT_FIELDS:
            values[key] = float(value)
        elif key == "state":
            values[key] = State(value)
        elif key == "mode":
            values[key] = Mode(value)
        elif key == "reason":
            values[key] = value
    return BreakerState(**values)


def _state_to_pairs(state: BreakerState) -> list[str]:
    pairs: list[str] = []
    for f in fields(BreakerState):
        if f.name == "health":  # the sentinel's, under a key of its own
            continue
        value = getattr(state, f.name)
        pairs += [f.name, repr(value) if isinstance(value, float) else str(value)]
    return pairs


class RedisStore(StateStore):
    backend = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        # An asyncio client belongs to the event loop it was made on: one per loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_client: redis.Redis | None = None

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            client = aioredis.Redis.from_url(
                self.url,
                decode_responses=True,
                socket_connect_timeout=SOCKET_TIMEOUT_S,
                socket_timeout=SOCKET_TIMEOUT_S,
            )
            entry = self._clients[loop] = (
                client,
                client.register_script(_RECORD),
                client.register_script(_TRANSITION),
                client.register_script(_ACQUIRE_PROBE),
                client.register_script(_SET_MODE),
                client.register_script(_SEED_SPEND),
                client.register_script(_RELEASE_PROBE),
                client.register_script(_HEALTH_RECORD),
            )
        return entry

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry[0].aclose()

    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        client = self._client()[0]
        spend_keys = tuple(spend_keys)  # iterated twice below: a generator would come back empty
        keys = [f"fo:{key}" for key in spend_keys]
        async with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(_breaker_key(name))
            pipe.hget(_health_key(name), "status")
            if keys:
                pipe.mget(keys)
            results = await pipe.execute()
        spent = dict(zip(spend_keys, results[2], strict=True)) if keys else {}
        state = _state_from_hash(results[0])
        if results[1]:
            state = replace(state, health=Health(results[1]))
        return state, {k: float(v or 0) for k, v in spent.items()}

    async def record(
        self,
        name: str,
        sample: Sample,
        *,
        now: float,
        windows: Windows,
        want_stats: bool,
        probe_version: int | None = None,
        spend: tuple[SpendIncrement, ...] = (),
        cache: CacheWrite | None = None,
    ) -> tuple[BreakerState, WindowStats | None]:
        index = windows.bucket(now)
        longest = max(windows.failure_window_s, windows.p95_window_s)
        args: list[Any] = [
            int(sample.failure),
            int(sample.ok),
            int(sample.slow),
            int(sample.over_p95),
            latency_bin(sample.latency_ms),
            windows.bucket_s * (windows.buckets_in(longest) + 1),
            -1 if probe_version is None else probe_version,
            int(want_stats),
            _bucket_prefix(name),
            index,
            windows.buckets_in(windows.failure_window_s),
            windows.buckets_in(windows.p95_window_s),
            windows.bucket_s,
        ]
        # SET with EX refuses a ttl under one second; like `cache_put`, such a write keeps nothing.
        if cache is not None and cache.ttl_s < 1:
            cache = None
        args += [0, ""] if cache is None else [cache.ttl_s, cache.value]
        for increment in spend:
            args += [repr(increment.amount), increment.ttl_s]
        keys = [_breaker_key(name), f"{_bucket_prefix(name)}{index}"]
        keys += [f"fo:{increment.key}" for increment in spend]
        if cache is not None:
            keys.append(f"fo:{cache.key}")
        raw_state, raw_stats = await self._client()[1](keys=keys, args=args)
        stats = WindowStats(*(int(v) for v in raw_stats)) if raw_stats else None
        return _state_from_hash(raw_state), stats

    async def transition(self, name: str, expected_version: int, new: BreakerState) -> bool:
        new_pairs = _state_to_pairs(_with_version(new, expected_version + 1))
        moved = await self._client()[2](
            keys=[_breaker_key(name)], args=[expected_version, *new_pairs]
        )
        return bool(moved)

    async def acquire_probe(
        self, name: str, version: int, limit: int, now: float | None = None
    ) -> bool:
        args = [version, limit, "" if now is None else repr(now)]
        return bool(await self._client()[3](keys=[_breaker_key(name)], args=args))

    async def release_probe(self, name: str, version: int) -> None:
        await self._client()[6](keys=[_breaker_key(name)], args=[version])

    async def set_mode(self, name: str, mode: Mode) -> BreakerState:
        version = await self._client()[4](keys=[_breaker_key(name)], args=[mode.value])
        return BreakerState(mode=mode, version=int(version))

    async def summary(self, name: str, windows: Windows, now: float) -> WindowSummary:
        client = self._client()[0]
        index = windows.bucket(now)
        failure_n = windows.buckets_in(windows.failure_window_s)
        p95_n = windows.buckets_in(windows.p95_window_s)
        async with client.pipeline(transaction=False) as pipe:
            for i in range(max(failure_n, p95_n)):
                pipe.hgetall(f"{_bucket_prefix(name)}{index - i}")
            buckets = await pipe.execute()
        calls = failures = 0
        histogram = [0] * BIN_COUNT
        for i, bucket in enumerate(buckets):
            if i < failure_n:
                calls += int(bucket.get("c", 0))
                failures += int(bucket.get("f", 0))
            if i < p95_n:
                for b in range(BIN_COUNT):
                    histogram[b] += int(bucket.get(f"h{b}", 0))
        return summarize(calls, failures, histogram, windows)

    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        await self._client()[5](keys=[f"fo:{key}"], args=[repr(amount), ttl_s])

    async def cache_get(self, key: str) -> str | None:
        value: str | None = await self._client()[0].get(f"fo:{key}")
        return value

    async def cache_put(self, key: str, value: str, ttl_s: int) -> None:
        if ttl_s >= 1:
            await self._client()[0].set(f"fo:{key}", value, ex=ttl_s)

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
    ) -> HealthState:
        args = [
            int(ok),
            repr(float(now)),
            max(1, window),
            degraded_after,
            repr(float(down_after_s)),
            detail,
            0 if ttl_s is None else max(1, round(ttl_s * 1000)),
        ]
        raw = await self._client()[7](keys=[_health_key(name)], args=args)
        return _health_from_hash(raw)

    async def health_read(self, names: Iterable[str]) -> dict[str, HealthState]:
        names = tuple(names)
        client = self._client()[0]
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(_health_key(name))
            raws = await pipe.execute()
        return {name: _health_from_hash(raw) for name, raw in zip(names, raws, strict=True)}

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        taken = await self._client()[0].set(
            f"fo:lock:{key}", "1", nx=True, px=max(1, round(ttl_s * 1000))
        )
        return bool(taken)

    async def sentinel_mark_run(self, at: float) -> None:
        await self._client()[0].set(SENTINEL_LAST_RUN_KEY, repr(float(at)))

    async def sentinel_last_run(self) -> float | None:
        value = await self._client()[0].get(SENTINEL_LAST_RUN_KEY)
        return None if value is None else float(value)

    async def config_version(self) -> int:
        return int(await self._client()[0].get(VERSION_KEY) or 0)

    async def bump_config_version_async(self) -> int:
        return int(await self._client()[0].incr(VERSION_KEY))

    def bump_config_version(self) -> int:
        if self._sync_client is None:
            self._sync_client = redis.Redis.from_url(
                self.url, socket_connect_timeout=2, socket_timeout=2
            )
        return int(self._sync_client.incr(VERSION_KEY))


def _with_version(state: BreakerState, version: int) -> BreakerState:
    return replace(state, version=version)
