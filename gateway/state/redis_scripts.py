"""What the Redis store keeps where, and the Lua scripts that change it atomically.

Every write is one script (or one command), so a transition, a probe slot or a counter is atomic
across processes. Keys carry the provider in a hash tag (`fo:{name}:…`), but a request's script
spans providers: one Redis node, not a cluster (docs/operations.md). The breaker's counting and
`next_health` (`gateway.engine.health`) are here in Lua too: a change to either changes both.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gateway.engine.breaker import BreakerState, Mode, State
from gateway.engine.health import Health, HealthState

VERSION_KEY = "fo:config:version"
SENTINEL_LAST_RUN_KEY = "fo:sentinel:last_run"

# What the scripts that touch budget holds share. A hold lapses by Redis's own clock, never a
# caller's: a serving process whose clock runs ahead can't drop another's live holds.
HOLDS_LUA = """
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
-- A counter's live holds (their sum and how many), the lapsed ones dropped first.
local function holds_total(h, x, now)
  local lapsed = redis.call('ZRANGEBYSCORE', x, '-inf', now)
  if #lapsed > 0 then
    redis.call('HDEL', h, unpack(lapsed))
    redis.call('ZREMRANGEBYSCORE', x, '-inf', now)
  end
  local total, count = 0, 0
  for _, v in ipairs(redis.call('HVALS', h)) do
    total = total + tonumber(v)
    count = count + 1
  end
  return total, count
end
local function hold_take(h, x, holder, amount, expires, ttl)
  redis.call('HSET', h, holder, amount)
  redis.call('ZADD', x, expires, holder)
  for _, k in ipairs({h, x}) do
    if redis.call('TTL', k) < ttl then redis.call('EXPIRE', k, ttl) end
  end
end
"""

TRANSITION = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""

ACQUIRE_PROBE = """
local st = redis.call('HMGET', KEYS[1], 'version', 'state', 'probes_admitted')
if tonumber(st[1] or '0') ~= tonumber(ARGV[1]) or st[2] ~= 'half_open' then return 0 end
if tonumber(st[3] or '0') >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'probes_admitted', 1)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'last_probe_at', ARGV[3]) end
return 1
"""

RELEASE_PROBE = """
local st = redis.call('HMGET', KEYS[1], 'version', 'state', 'probes_admitted')
if tonumber(st[1] or '0') ~= tonumber(ARGV[1]) or st[2] ~= 'half_open' then return 0 end
if tonumber(st[3] or '0') <= 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'probes_admitted', -1)
return 1
"""

# A reset breaker at the next version and the next statistics epoch (see record_script.py).
SET_MODE = """
local cur = redis.call('HMGET', KEYS[1], 'version', 'epoch')
local v = tonumber(cur[1] or '0') + 1
local e = tonumber(cur[2] or '0') + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'mode', ARGV[1], 'state', 'closed', 'version', v, 'epoch', e)
return v
"""

SEED_SPEND = """
local current = tonumber(redis.call('GET', KEYS[1]) or '-1')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
end
return 1
"""

# `rate.judge` in Lua (change both, and RATE_JUDGE_LUA's use in the record script). KEYS:
# requests previous/current minute, tokens previous/current minute. ARGV: the previous minute's
# weight, requests and tokens per minute (0: no limit), the counters' ttl, whether to check (0:
# count regardless), how many requests to count (negative: given back).
RATE_JUDGE_LUA = """
local function rate_fits(k, w, rpm, tpm)
  local v = {}
  for i = 1, 4 do v[i] = tonumber(redis.call('GET', KEYS[k + i]) or '0') end
  local ok = true
  if rpm > 0 and v[1] * w + v[2] + 1 > rpm then ok = false end
  if tpm > 0 and v[3] * w + v[4] >= tpm then ok = false end
  return ok, v
end
"""
RATE_TAKE = (
    RATE_JUDGE_LUA
    + """
local ok, v = rate_fits(0, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
if ARGV[5] ~= '1' then ok = true end
if ok then
  v[2] = tonumber(redis.call('INCRBYFLOAT', KEYS[2], ARGV[6]))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
end
return {ok and 1 or 0, tostring(v[1]), tostring(v[2]), tostring(v[3]), tostring(v[4])}
"""
)

# `health.next_health` in Lua (change both): the window is a string of 1s and 0s, newest last;
# `since` is kept as the caller's own text, so a float never goes through Lua's formatting.
HEALTH_RECORD = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'since', 'window', 'loading_since')
local status, since = cur[1] or 'unknown', cur[2] or '0'
local n = tonumber(ARGV[3])
local result, grace, loading_since = ARGV[1], tonumber(ARGV[8]), '0'
if grace > 0 then
  loading_since = (not cur[4] or cur[4] == '0') and ARGV[2] or cur[4]
  if tonumber(ARGV[2]) - tonumber(loading_since) >= grace then result = '0' end
end
local win = (cur[3] or '') .. result
if #win > n then win = string.sub(win, #win - n + 1) end
local bad = 0
for i = 1, #win do if string.sub(win, i, i) == '0' then bad = bad + 1 end end
local clean = #win >= n and bad == 0
local new = status
if grace > 0 and result == '1' then new = 'loading'
elseif status == 'degraded' then
  if clean then new = 'healthy'
  elseif tonumber(ARGV[2]) - tonumber(since) >= tonumber(ARGV[5]) then new = 'down' end
elseif status == 'down' then
  if clean then new = 'healthy' end
elseif bad >= tonumber(ARGV[4]) then new = 'degraded'
else new = 'healthy' end
if new ~= status then since = ARGV[2] end
redis.call('HSET', KEYS[1], 'status', new, 'since', since, 'window', win,
           'detail', ARGV[6], 'checked_at', ARGV[2], 'loading_since', loading_since)
if tonumber(ARGV[7]) > 0 then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
else
  redis.call('PERSIST', KEYS[1])
end
return {'status', new, 'since', since, 'window', win, 'detail', ARGV[6], 'checked_at', ARGV[2],
        'loading_since', loading_since}
"""

INT_FIELDS = {"version", "consecutive_failures", "reopens", "probes_admitted", "probes_succeeded"}
FLOAT_FIELDS = {"opened_at", "open_until", "half_opened_at", "last_probe_at", "closed_at"}


def breaker_key(name: str) -> str:
    return f"fo:{{{name}}}:breaker"


def bucket_prefix(name: str) -> str:
    return f"fo:{{{name}}}:b:"


def health_key(name: str) -> str:
    return f"fo:{{{name}}}:health"


def epoch_of(raw_breaker: dict[str, str]) -> str:
    """The statistics epoch a breaker hash is at: buckets of another one no longer count."""
    return raw_breaker.get("epoch", "0")


def bucket_counts(raw_bucket: dict[str, str], epoch: str) -> dict[str, str]:
    """A bucket hash's fields if it counted for `epoch`, else nothing."""
    return raw_bucket if raw_bucket.get("e", "0") == epoch else {}


def health_from_hash(raw: dict[str, str] | list[str]) -> HealthState:
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
        loading_since=float(raw.get("loading_since") or 0),
    )


def state_from_hash(raw: dict[str, str] | list[str]) -> BreakerState:
    if isinstance(raw, list):  # HGETALL inside a script answers a flat list
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in INT_FIELDS:
            values[key] = int(value)
        elif key in FLOAT_FIELDS:
            values[key] = float(value)
        elif key == "state":
            values[key] = State(value)
        elif key == "mode":
            values[key] = Mode(value)
        elif key == "reason":
            values[key] = value
    return BreakerState(**values)


def state_to_pairs(state: BreakerState) -> list[str]:
    pairs: list[str] = []
    for f in fields(BreakerState):
        if f.name == "health":  # the sentinel's, under a key of its own
            continue
        value = getattr(state, f.name)
        pairs += [f.name, repr(value) if isinstance(value, float) else str(value)]
    return pairs


# `budgets.hold_refusal` in Lua (change both). KEYS: per hold, its counter, the counter's holds
# (hash holder -> amount) and their expiries (sorted set holder -> when, on Redis's clock).
# ARGV: the holder, how long the holds live, then per hold its amount, limit, level and the
# keys' ttl. Every hold is taken, or none; lapsed holds (their process died mid-call) are
# dropped first.
RESERVE = (
    HOLDS_LUA
    + """
local holder, now = ARGV[1], server_now()
local expires = now + tonumber(ARGV[2])
local n = #KEYS / 3
local spent, held, refusal = {}, {}, ''
for i = 1, n do
  held[i] = holds_total(KEYS[3 * i - 1], KEYS[3 * i], now)
  spent[i] = tonumber(redis.call('GET', KEYS[3 * i - 2]) or '0')
  if refusal == '' then
    local a = 3 + (i - 1) * 4
    local used = spent[i] + held[i]
    if used + tonumber(ARGV[a]) > tonumber(ARGV[a + 1]) + 1e-9 then
      refusal = 'budget_exhausted'
    elseif used >= tonumber(ARGV[a + 2]) - 1e-9 then
      refusal = 'budget_high_priority_only'
    end
  end
end
if refusal == '' then
  for i = 1, n do
    local a = 3 + (i - 1) * 4
    hold_take(KEYS[3 * i - 1], KEYS[3 * i], holder, ARGV[a], expires, tonumber(ARGV[a + 3]))
    held[i] = held[i] + tonumber(ARGV[a])
  end
end
for i = 1, n do
  spent[i] = string.format('%.17g', spent[i])
  held[i] = string.format('%.17g', held[i])
end
return {refusal, spent, held}
"""
)

# KEYS: per counter, its holds and their expiries (as RESERVE's). Each counter's live holds:
# how many, and their sum.
HOLDS_READ = (
    HOLDS_LUA
    + """
local now = server_now()
local out = {}
for i = 1, #KEYS / 2 do
  local total, count = holds_total(KEYS[2 * i - 1], KEYS[2 * i], now)
  out[#out + 1] = {count, string.format('%.17g', total)}
end
return out
"""
)


def hold_keys(counter: str) -> tuple[str, str]:
    """A budget counter's holds (hash) and their expiries (sorted set)."""
    return f"fo:{counter}:holds", f"fo:{counter}:hold_expiry"
