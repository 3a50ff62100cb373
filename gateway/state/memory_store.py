"""The in-process state store: the embedded mode's, and Redis's stand-in while it is down.

Its statistics buckets are dicts of the fields the Redis store keeps in its bucket hashes
(`c`, `f`, `s`, `p` and the latency bins, see `histogram`), summed by the same `summarize`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from gateway.engine.breaker import BreakerState, Mode, State, WindowStats
from gateway.engine.budgets import Hold
from gateway.engine.health import Health, HealthState, next_health
from gateway.engine.rate import BUCKET_TTL_S, Limits, RateKeys, judge
from gateway.state import histogram
from gateway.state.contract import (
    RecordCall,
    Recorded,
    Reserved,
    StateStore,
    StatusRead,
    Windows,
    summarize,
)
from gateway.state.holds import Holds
from gateway.state.memory_cache import AnswerCache
from gateway.state.refusal_log import RefusalRing

# One statistics bucket: the fields the Redis store keeps in its bucket hash (contract.py).
Bucket = dict[str, int]

# A breaker nothing has moved yet: one shared value (frozen), not one made per read.
NEVER_MOVED = BreakerState()
# A provider no check has judged (frozen: one for all).
NO_VERDICT = HealthState()


class MemoryStore(RefusalRing, StateStore):
    """State in this process only: the embedded mode, and Redis's stand-in while it is down."""

    backend = "memory"

    def __init__(
        self,
        *,
        cache_max_entries: int = 10_000,
        cache_max_bytes: int = 64 * 2**20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` times expiries (cached answers, health verdicts, locks); the breaker's and
        the health window's time is the `now` given."""
        self._states: dict[str, BreakerState] = {}
        self._buckets: dict[str, dict[int, Bucket]] = {}  # name -> bucket index -> fields
        # Counters: a few per budget and period, and the rate windows' (two a minute per
        # client); each lapses after its ttl, like its Redis key, swept every so many writes.
        self._spend: dict[str, float] = {}
        self._spend_expiry: dict[str, float] = {}  # key -> when it lapses, on `clock`
        self._writes_since_sweep = 0
        self._holds = Holds()
        self._version = 0
        self._version_lock = threading.Lock()
        self._cache = AnswerCache(
            max_entries=cache_max_entries, max_bytes=cache_max_bytes, clock=clock
        )
        self._clock = clock
        # name -> (verdict, when it lapses on `clock`, or None)
        self._health: dict[str, tuple[HealthState, float | None]] = {}
        # name -> (state, its health, the state with that health): `_with_health`'s last copy
        self._dressed: dict[str, tuple[BreakerState, str, BreakerState]] = {}
        self._locks: dict[str, float] = {}  # key -> held until, on `clock`
        self._lock_lock = threading.Lock()
        self._sentinel_last_run: float | None = None

    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        spent = {key: self._counter(key) for key in spend_keys}
        return self._with_health(name, self._states.get(name, NEVER_MOVED)), spent

    def _with_health(self, name: str, state: BreakerState) -> BreakerState:
        health = self._health_of(name).status
        if health == state.health:
            return state
        # The same state with the same verdict, read again (every call, in steady state): the
        # copy made last time, not another.
        dressed = self._dressed.get(name)
        if dressed is not None and dressed[0] is state and dressed[1] == health:
            return dressed[2]
        copy = replace(state, health=health)
        self._dressed[name] = (state, health, copy)
        return copy

    async def record(self, call: RecordCall) -> Recorded:
        name, sample, now, windows = call.name, call.sample, call.now, call.windows
        probe_version, spend, cache = call.probe_version, call.spend, call.cache
        release, standing, read_spend = call.release, call.standing, call.read_spend
        buckets = self._buckets.setdefault(name, {})
        index = windows.bucket(now)
        bucket = buckets.get(index)
        if bucket is None:
            bucket = buckets[index] = {}
            keep_after = index - windows.buckets_in(
                max(windows.failure_window_s, windows.p95_window_s)
            )
            for old in [i for i in buckets if i <= keep_after]:
                del buckets[old]
        fields = (
            ("c", True),
            ("f", sample.failure),
            ("s", sample.slow),
            ("p", sample.over_p95),
            (histogram.bin_field(histogram.latency_bin(sample.latency_ms)), True),
        )
        for field, counted in fields if sample.counted else ():
            if counted:
                bucket[field] = bucket.get(field, 0) + 1
        current = self._states.get(name, NEVER_MOVED)
        if not sample.counted:
            pass  # counted while still in flight: neither a second failure nor a success
        elif sample.failure:
            current = replace(current, consecutive_failures=current.consecutive_failures + 1)
        elif sample.ok:
            if current.consecutive_failures:
                current = replace(current, consecutive_failures=0)
            if (
                probe_version is not None
                and current.version == probe_version
                and current.state == State.HALF_OPEN
            ):
                current = replace(current, probes_succeeded=current.probes_succeeded + 1)
        self._states[name] = current
        for increment in spend:
            self._count(increment.key, increment.amount, increment.ttl_s)
        if release is not None:
            self._holds.release(release.holder, release.keys)
        standing_taken = standing is not None and not (
            self._holds.reserve(
                standing.holder,
                standing.holds,
                self._counter,
                now=now,
                expires_at=now + standing.life_s,
            ).refusal
        )
        slot_taken = (
            call.slot is not None
            and (  # counted ahead as a rate check counts one
                await self.rate_take(call.slot.keys, call.slot.caps, ttl_s=BUCKET_TTL_S)
            )[0]
        )
        if cache is not None:
            self._cache.put(cache.key, cache.value, cache.ttl_s)
        stats = None
        if call.want_stats:
            stats = self._stats(buckets, windows, index, windows.bucket(current.closed_at))
        spent = {key: self._counter(key) for key in read_spend}
        spent.update((increment.key, self._spend[increment.key]) for increment in spend)
        return Recorded(self._with_health(name, current), stats, spent, standing_taken, slot_taken)

    def _stats(
        self, buckets: dict[int, Bucket], windows: Windows, index: int, closed_bucket: int
    ) -> WindowStats:
        """The windows' sums, from after the breaker last closed."""
        calls = failures = slow = p95_calls = over = recent_calls = recent_over = 0
        failure_from = max(index - windows.buckets_in(windows.failure_window_s), closed_bucket)
        p95_buckets = windows.buckets_in(windows.p95_window_s)
        p95_from = max(index - p95_buckets, closed_bucket)
        recent_from = max(index - -(-p95_buckets // 2), closed_bucket)  # its later half
        for i, bucket in buckets.items():
            if failure_from < i <= index:
                calls += bucket.get("c", 0)
                failures += bucket.get("f", 0)
                slow += bucket.get("s", 0)
            if p95_from < i <= index:
                p95_calls += bucket.get("c", 0)
                over += bucket.get("p", 0)
                if i > recent_from:
                    recent_calls += bucket.get("c", 0)
                    recent_over += bucket.get("p", 0)
        return WindowStats(calls, failures, slow, p95_calls, over, recent_calls, recent_over)

    async def transition(self, name: str, expected_version: int, new: BreakerState) -> bool:
        current = self._states.get(name, NEVER_MOVED)
        if current.version != expected_version:
            return False
        self._states[name] = replace(new, version=expected_version + 1, health=Health.UNKNOWN)
        return True

    async def acquire_probe(
        self, name: str, version: int, limit: int, now: float | None = None
    ) -> bool:
        current = self._states.get(name, NEVER_MOVED)
        if (
            current.version != version
            or current.state != State.HALF_OPEN
            or current.probes_admitted >= limit
        ):
            return False
        self._states[name] = replace(
            current,
            probes_admitted=current.probes_admitted + 1,
            last_probe_at=current.last_probe_at if now is None else now,
        )
        return True

    async def release_probe(self, name: str, version: int) -> None:
        current = self._states.get(name, NEVER_MOVED)
        if (
            current.version == version
            and current.state == State.HALF_OPEN
            and current.probes_admitted > 0
        ):
            self._states[name] = replace(current, probes_admitted=current.probes_admitted - 1)

    async def set_mode(self, name: str, mode: Mode) -> BreakerState:
        current = self._states.get(name, NEVER_MOVED)
        reset = BreakerState(mode=mode, version=current.version + 1)
        self._states[name] = reset
        self._buckets.pop(name, None)  # the statistics start afresh with the reset breaker
        return reset

    async def status_read(
        self,
        names: Sequence[str],
        *,
        windows: Windows,
        now: float,
        spend_keys: Iterable[str] = (),
    ) -> StatusRead:
        breakers = {name: (await self.read(name))[0] for name in names}
        summaries = {
            name: summarize(self._buckets.get(name, {}).items(), windows, now) for name in names
        }
        spent = {key: self._counter(key) for key in spend_keys}
        return StatusRead(breakers, summaries, spent)

    def _count(self, key: str, amount: float, ttl_s: int) -> float:
        now = self._clock()
        if self._spend_expiry.get(key, now + 1) <= now:  # lapsed: it starts again from zero
            self._spend.pop(key, None)
        value = self._spend[key] = self._spend.get(key, 0.0) + amount
        self._spend_expiry[key] = now + ttl_s
        self._writes_since_sweep += 1
        if self._writes_since_sweep >= 1024:
            self._writes_since_sweep = 0
            for lapsed in [k for k, until in self._spend_expiry.items() if until <= now]:
                del self._spend_expiry[lapsed]
                self._spend.pop(lapsed, None)
        return value

    def _counter(self, key: str) -> float:
        until = self._spend_expiry.get(key)
        if until is not None and until <= self._clock():
            return 0.0
        return self._spend.get(key, 0.0)

    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        if self._counter(key) < amount:
            self._spend[key] = amount
            self._spend_expiry[key] = self._clock() + ttl_s

    async def reserve(
        self, holder: str, holds: Sequence[Hold], *, now: float, life_s: float
    ) -> Reserved:
        return self._holds.reserve(holder, holds, self._counter, now=now, expires_at=now + life_s)

    async def release(self, holder: str, keys: Iterable[str]) -> None:
        self._holds.release(holder, keys)

    async def holds_read(self, keys: Iterable[str], *, now: float) -> dict[str, tuple[int, float]]:
        return self._holds.read(keys, now=now)

    async def rate_take(
        self,
        keys: RateKeys,
        limits: Limits,
        *,
        ttl_s: int,
        check: bool = True,
        amount: int = 1,
    ) -> tuple[bool, dict[str, float]]:
        counts = {key: self._counter(key) for key in keys.all}
        if check and not judge(limits, counts, keys).admitted:
            return False, counts
        counts[keys.requests_now] = self._count(keys.requests_now, float(amount), ttl_s)
        return True, counts

    async def cache_get(self, key: str) -> str | None:
        return self._cache.get(key)

    async def cache_put(self, key: str, value: str, ttl_s: int) -> None:
        self._cache.put(key, value, ttl_s)

    def _health_of(self, name: str) -> HealthState:
        entry = self._health.get(name)
        if entry is None:
            return NO_VERDICT
        state, lapses_at = entry
        if lapses_at is not None and self._clock() >= lapses_at:
            del self._health[name]
            return NO_VERDICT
        return state

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
        state = next_health(
            self._health_of(name),
            ok,
            now=now,
            window=window,
            degraded_after=degraded_after,
            down_after_s=down_after_s,
            detail=detail,
            loading_grace_s=loading_grace_s,
        )
        self._health[name] = (state, None if ttl_s is None else self._clock() + ttl_s)
        return state

    async def health_read(self, names: Iterable[str]) -> dict[str, HealthState]:
        return {name: self._health_of(name) for name in names}

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        with self._lock_lock:  # one store serves every event loop of the process
            now = self._clock()
            if self._locks.get(key, 0.0) > now:
                return False
            self._locks[key] = now + ttl_s
            return True

    async def sentinel_mark_run(self, at: float) -> None:
        self._sentinel_last_run = at

    async def sentinel_last_run(self) -> float | None:
        return self._sentinel_last_run

    async def config_version(self) -> int:
        return self._version

    def bump_config_version(self) -> int:
        with self._version_lock:
            self._version += 1
            return self._version
