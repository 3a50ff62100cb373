"""The record script: one call's counting, its spend, its budget holds and its cache write in
one step (one Redis round trip), with the breaker's statistics read back.

Its fixed arguments have names (`RECORD_ARGS`): the script declares each as a local of that name
(`ARGV[n]` in one place, the prologue made from the same list) and `record_args` takes them by
name, so neither side counts positions. `ScriptCall.of` turns a store's `RecordCall` into the
script's keys and arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gateway.engine.rate import BUCKET_TTL_S
from gateway.state import histogram
from gateway.state import redis_scripts as scripts
from gateway.state.contract import RecordCall
from gateway.state.redis_scripts import HOLDS_LUA, RATE_JUDGE_LUA

RECORD_ARGS = (
    "failure", "ok", "slow", "over_p95",  # the call's outcome: each '1' or '0'
    "latency_bin",  # its latency's histogram field; '' for a call already counted
    "bucket_ttl", "probe_version", "want_stats",
    "bucket_prefix", "bucket", "failure_buckets", "p95_buckets", "bucket_s",
    "cache_ttl", "cache_value",  # the answer to cache with its counting (0, '': none)
    # a rate slot to count ahead ('1' or '0'): the window's weight, its caps, the counter's ttl
    "slot", "slot_weight", "slot_rpm", "slot_tpm", "slot_ttl",
    "spend_count",  # how many (amount, ttl) pairs follow
)  # fmt: skip
_NAMES = frozenset(RECORD_ARGS)
_PROLOGUE = (
    "".join(f"local {name} = ARGV[{n}]\n" for n, name in enumerate(RECORD_ARGS, start=1))
    + f"local TAIL = {len(RECORD_ARGS) + 1}\n"
)


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """A `RecordCall` as the script takes it: its keys and arguments, and the spend keys in the
    order the script answers their values."""

    keys: list[str]
    args: list[Any]
    spend_keys: tuple[str, ...]

    @classmethod
    def of(cls, call: RecordCall) -> ScriptCall:
        name, sample, now, windows = call.name, call.sample, call.now, call.windows
        spend, cache, release, standing = call.spend, call.cache, call.release, call.standing
        slot = call.slot
        index = windows.bucket(now)
        longest = max(windows.failure_window_s, windows.p95_window_s)
        # SET with EX refuses a ttl under one second; like `cache_put`, such a write keeps nothing.
        if cache is not None and cache.ttl_s < 1:
            cache = None
        args = record_args(
            failure=int(sample.failure),
            ok=int(sample.ok),
            slow=int(sample.slow),
            over_p95=int(sample.over_p95),
            # No histogram field: a call already counted (`Sample.counted`), not counted again.
            latency_bin=(
                histogram.bin_field(histogram.latency_bin(sample.latency_ms))
                if sample.counted
                else ""
            ),
            bucket_ttl=windows.bucket_s * (windows.buckets_in(longest) + 1),
            probe_version=-1 if call.probe_version is None else call.probe_version,
            want_stats=int(call.want_stats),
            bucket_prefix=scripts.bucket_prefix(name),
            bucket=index,
            failure_buckets=windows.buckets_in(windows.failure_window_s),
            p95_buckets=windows.buckets_in(windows.p95_window_s),
            bucket_s=windows.bucket_s,
            cache_ttl=0 if cache is None else cache.ttl_s,
            cache_value="" if cache is None else cache.value,
            slot=int(slot is not None),
            slot_weight=repr(slot.keys.weight) if slot is not None else "0",
            slot_rpm=slot.caps.requests_per_minute if slot is not None else 0,
            slot_tpm=slot.caps.tokens_per_minute if slot is not None else 0,
            slot_ttl=BUCKET_TTL_S,
            spend_count=len(spend),
        )
        for increment in spend:
            args += [repr(increment.amount), increment.ttl_s]
        args += ["", 0] if release is None else [release.holder, len(release.keys)]
        if standing is not None:
            args += [standing.holder, len(standing.holds), repr(standing.life_s)]
            for hold in standing.holds:
                ttl = max(hold.ttl_s, math.ceil(standing.life_s) + 60)
                args += [repr(hold.amount), repr(hold.limit), ttl]
        # A key incremented is answered with its new value; only the others are read.
        incremented = [increment.key for increment in spend]
        read_only = [key for key in dict.fromkeys(call.read_spend) if key not in incremented]
        keys = [
            scripts.breaker_key(name),
            f"{scripts.bucket_prefix(name)}{index}",
            scripts.health_key(name),
        ]
        keys += [f"fo:{key}" for key in (*incremented, *read_only)]
        if release is not None:
            for counter in release.keys:
                keys += scripts.hold_keys(counter)
        if standing is not None:
            for hold in standing.holds:
                keys += [f"fo:{hold.key}", *scripts.hold_keys(hold.key)]
        if slot is not None:
            keys += [f"fo:{key}" for key in slot.keys.all]
        if cache is not None:
            keys.append(f"fo:{cache.key}")
        return cls(keys, args, (*incremented, *read_only))


def record_args(**values: Any) -> list[Any]:
    """The script's fixed arguments in its order, from their names; every one is needed."""
    if values.keys() != _NAMES:
        missing, unknown = _NAMES - values.keys(), values.keys() - _NAMES
        raise TypeError(f"record_args: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return [values[name] for name in RECORD_ARGS]


# KEYS: breaker, the call's bucket, health, the spend keys to increment, the spend keys to read,
# the holds to release (each counter's hash and expiry set), the standing holds to take (each
# counter, its hash and expiry set), the rate slot's four counters when one is asked (`slot`),
# then the cache entry's key when there is one (`cache_ttl` > 0). ARGV: the fixed arguments
# (`RECORD_ARGS`), then from `TAIL` on each spend increment's amount and ttl; the holder and how
# many holds to release; the standing holder, how many to take, how long they live, and each
# one's amount, limit and ttl.
# A bucket carries the `epoch` of the breaker it counted for (field `e`): `set_mode` moves the
# breaker's, so the calls counted before it stop counting, and a bucket of an older epoch is
# emptied before it counts again.
RECORD = (
    HOLDS_LUA
    + RATE_JUDGE_LUA
    + _PROLOGUE
    + """
local b, bk, hk = KEYS[1], KEYS[2], KEYS[3]
local epoch = redis.call('HGET', b, 'epoch') or '0'
if (redis.call('HGET', bk, 'e') or '0') ~= epoch then
  redis.call('DEL', bk)
  redis.call('HSET', bk, 'e', epoch)
end
-- latency_bin (the latency's bin) is empty for a call already counted while still in flight
local counted = latency_bin ~= ''
if counted then
  redis.call('HINCRBY', bk, 'c', 1)
  if failure == '1' then redis.call('HINCRBY', bk, 'f', 1) end
  if slow == '1' then redis.call('HINCRBY', bk, 's', 1) end
  if over_p95 == '1' then redis.call('HINCRBY', bk, 'p', 1) end
  redis.call('HINCRBY', bk, latency_bin, 1)
end
redis.call('EXPIRE', bk, tonumber(bucket_ttl))
-- (not counted: neither a second failure nor a success that clears the stuck ones)
if counted and failure == '1' then
  redis.call('HINCRBY', b, 'consecutive_failures', 1)
elseif counted and ok == '1' then
  redis.call('HSET', b, 'consecutive_failures', 0)
  local pv = tonumber(probe_version)
  if pv >= 0 then
    local st = redis.call('HMGET', b, 'version', 'state')
    if tonumber(st[1] or '0') == pv and st[2] == 'half_open' then
      redis.call('HINCRBY', b, 'probes_succeeded', 1)
    end
  end
end
local n_spend = tonumber(spend_count)
local holder_at = TAIL + 2 * n_spend
local n_release = tonumber(ARGV[holder_at + 1] or '0')
local st = holder_at + 2
local n_standing = tonumber(ARGV[st + 1] or '0')
local n_slot = slot == '1' and 4 or 0
local last_read = #KEYS - 2 * n_release - 3 * n_standing - n_slot
if cache_ttl ~= '0' then
  -- the call's answer, cached with its counting: the last key is the cache entry's
  redis.call('SET', KEYS[#KEYS], cache_value, 'EX', tonumber(cache_ttl))
  last_read = last_read - 1
end
local slot_at = last_read + 2 * n_release + 3 * n_standing
local spent = {}
for i = 1, n_spend do
  local a = TAIL + (i - 1) * 2
  spent[i] = redis.call('INCRBYFLOAT', KEYS[3 + i], ARGV[a])
  redis.call('EXPIRE', KEYS[3 + i], tonumber(ARGV[a + 1]))
end
-- the call's budget holds go in the same step as its spend comes
for i = 0, n_release - 1 do
  redis.call('HDEL', KEYS[last_read + 1 + 2 * i], ARGV[holder_at])
  redis.call('ZREM', KEYS[last_read + 2 + 2 * i], ARGV[holder_at])
end
-- then the standing holds for this process's next call, all or none, as RESERVE takes them
local standing_taken = 0
if n_standing > 0 then
  local first, now = last_read + 2 * n_release, server_now()
  local expires = now + tonumber(ARGV[st + 2])
  local fits = true
  for i = 0, n_standing - 1 do
    local k = first + 3 * i
    local held = holds_total(KEYS[k + 2], KEYS[k + 3], now)
    local used = tonumber(redis.call('GET', KEYS[k + 1]) or '0') + held
    local a = st + 3 + 3 * i
    if used + tonumber(ARGV[a]) > tonumber(ARGV[a + 1]) + 1e-9 then fits = false end
  end
  if fits then
    for i = 0, n_standing - 1 do
      local k, a = first + 3 * i, st + 3 + 3 * i
      hold_take(KEYS[k + 2], KEYS[k + 3], ARGV[st], ARGV[a], expires, tonumber(ARGV[a + 2]))
    end
    standing_taken = 1
  end
end
-- then one request of the caller counted ahead for this process's next, if the window fits it
local slot_taken = 0
if n_slot > 0 then
  local fits = rate_fits(slot_at, tonumber(slot_weight), tonumber(slot_rpm), tonumber(slot_tpm))
  if fits then
    redis.call('INCRBYFLOAT', KEYS[slot_at + 2], 1)
    redis.call('EXPIRE', KEYS[slot_at + 2], tonumber(slot_ttl))
    slot_taken = 1
  end
end
for i = 4 + n_spend, last_read do
  spent[#spent + 1] = redis.call('GET', KEYS[i]) or '0'
end
local stats = {}
if want_stats == '1' then
  local idx, fw, pw = tonumber(bucket), tonumber(failure_buckets), tonumber(p95_buckets)
  -- the p95 window's later half, counted apart too (the rule asks both halves)
  local half = math.ceil(pw / 2)
  -- only calls after the breaker last closed count toward tripping it again
  local closed_at = tonumber(redis.call('HGET', b, 'closed_at') or '0')
  local closed = math.floor(closed_at / tonumber(bucket_s))
  fw = math.max(0, math.min(fw, idx - closed))
  pw = math.max(0, math.min(pw, idx - closed))
  local c, f, s, pc, p, rc, rp = 0, 0, 0, 0, 0, 0, 0
  for i = 0, math.max(fw, pw) - 1 do
    local v = redis.call('HMGET', bucket_prefix .. (idx - i), 'c', 'f', 's', 'p', 'e')
    if (v[5] or '0') == epoch then
      local vc = tonumber(v[1] or '0')
      if i < fw then
        c = c + vc
        f = f + tonumber(v[2] or '0')
        s = s + tonumber(v[3] or '0')
      end
      if i < pw then
        pc = pc + vc
        p = p + tonumber(v[4] or '0')
        if i < half then
          rc = rc + vc
          rp = rp + tonumber(v[4] or '0')
        end
      end
    end
  end
  stats = {c, f, s, pc, p, rc, rp}
end
local health = redis.call('HGET', hk, 'status') or ''
return {redis.call('HGETALL', b), stats, spent, health, standing_taken, slot_taken}
"""
)
