"""Shared state: breakers, call statistics, budget counters, cached answers, the config
version, the sentinel's health verdicts and the background jobs' locks.

`MemoryStore` (in `state_memory`) keeps them in this process (the embedded mode); `RedisStore`
(in `state_redis`) keeps them in Redis with atomic scripts, so several serving processes behave
as one; `ResilientStore` (in `state_resilient`) is Redis with this process's memory standing in
while Redis is down. They answer the same contract and run the same test suite. Breaker
semantics live in `breaker.py`; a store only applies them: counters, compare-and-set
transitions and bounded probe slots.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from providers.engine.breaker import BreakerState, Mode, WindowStats
from providers.engine.health import HealthState

# Upper bounds (ms) of the latency histogram kept per statistics bucket, for the status page's
# p95. The breaker itself never needs it: it counts calls over its limits exactly.
LATENCY_BOUNDS_MS = (
    25, 50, 100, 250, 500, 750, 1000, 1500, 2000, 3000, 5000, 8000, 12000, 20000, 30000, 60000,
)  # fmt: skip
BIN_COUNT = len(LATENCY_BOUNDS_MS) + 1


def latency_bin(latency_ms: float) -> int:
    return bisect.bisect_left(LATENCY_BOUNDS_MS, latency_ms)


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished call, as the statistics count it."""

    ok: bool
    failure: bool  # counts as a breaker failure
    slow: bool
    over_p95: bool
    latency_ms: float


@dataclass(frozen=True, slots=True)
class SpendIncrement:
    key: str
    amount: float
    ttl_s: int


@dataclass(frozen=True, slots=True)
class CacheWrite:
    """An answer to keep under `key` for `ttl_s` seconds, written with the call's counting."""

    key: str
    value: str
    ttl_s: int


@dataclass(frozen=True, slots=True)
class Windows:
    bucket_s: int
    failure_window_s: int
    p95_window_s: int

    def bucket(self, now: float) -> int:
        return int(now // self.bucket_s)

    def buckets_in(self, window_s: int) -> int:
        return max(1, -(-window_s // self.bucket_s))


@dataclass(frozen=True, slots=True)
class WindowSummary:
    calls: int
    failures: int
    failure_rate_pct: float
    p95_ms: float | None
    calls_per_minute: float


def spend_key(budget_id: int, period: str, now: float) -> tuple[str, int]:
    """The counter of one budget for the period that `now` falls in, and its time to live."""
    moment = datetime.fromtimestamp(now, UTC)
    if period == "month":
        return f"spend:{budget_id}:{moment:%Y-%m}", 62 * 86_400
    return f"spend:{budget_id}:{moment:%Y-%m-%d}", 2 * 86_400


class StateStore(ABC):
    backend: str

    @abstractmethod
    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        """A provider's breaker and the named spend counters, in one round trip."""

    @abstractmethod
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
        """Count a finished call (and its spend) atomically; returns the breaker as it now is,
        and the window sums when asked. A probe's success counts toward closing only if the
        breaker is still at the half-open version that admitted it. `cache` is stored in the
        same round trip, as `cache_put` would."""

    @abstractmethod
    async def transition(self, name: str, expected_version: int, new: BreakerState) -> bool:
        """Replace the breaker if it is still at `expected_version`; False if someone moved."""

    @abstractmethod
    async def acquire_probe(
        self, name: str, version: int, limit: int, now: float | None = None
    ) -> bool:
        """Take one of the `limit` half-open probe slots of that version, if one is left
        (noting when, so a round whose probes never report can be told from a slow one)."""

    @abstractmethod
    async def release_probe(self, name: str, version: int) -> None:
        """Give back a probe slot whose call was abandoned before it could report (a hedged
        race it lost), so the round isn't left waiting for a verdict that never comes."""

    @abstractmethod
    async def set_mode(self, name: str, mode: Mode) -> BreakerState:
        """An operator's override; also the way back to AUTO. Resets the breaker to CLOSED."""

    @abstractmethod
    async def summary(self, name: str, windows: Windows, now: float) -> WindowSummary:
        """What the status page shows of a provider's recent calls."""

    @abstractmethod
    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        """Raise a spend counter to at least `amount`, the ledger's figure: a counter lost with
        a Redis restart comes back, one ahead of the (batched) ledger is kept as it is."""

    @abstractmethod
    async def cache_get(self, key: str) -> str | None:
        """The answer cached under `key`, if it is there and has not expired."""

    @abstractmethod
    async def cache_put(self, key: str, value: str, ttl_s: int) -> None:
        """Keep `value` under `key` for `ttl_s` seconds; a ttl under one second keeps nothing.
        A store may forget an entry sooner (memory: its size limits; Redis: its maxmemory)."""

    @abstractmethod
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
        """Add one check's result to the provider's window of the last `window` and apply
        `health.next_health` atomically; returns the verdict. Kept apart from the breaker
        (whose writes never touch it) and read with it by `read`. With `ttl_s`, the verdict
        lapses to unknown when no result follows within that long."""

    @abstractmethod
    async def health_read(self, names: Iterable[str]) -> dict[str, HealthState]:
        """The verdict of each named provider (unknown for one never checked)."""

    @abstractmethod
    async def try_lock(self, key: str, ttl_s: float) -> bool:
        """Take the lock `key` for `ttl_s` seconds if nobody holds it: True for the one caller
        that got it. Never released early: it marks a job's turn for that long."""

    @abstractmethod
    async def sentinel_mark_run(self, at: float) -> None:
        """Note that the sentinel ran at `at` (wall time)."""

    @abstractmethod
    async def sentinel_last_run(self) -> float | None:
        """When the sentinel last ran, in any process; None if never (the watchdog's)."""

    @abstractmethod
    async def config_version(self) -> int: ...

    @abstractmethod
    def bump_config_version(self) -> int:
        """Sync, for the admin: move the version so every process rebuilds its snapshot."""

    def health(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": True}

    async def aclose(self) -> None:  # noqa: B027 - most stores hold no connections
        """Release this loop's connections (on shutdown)."""


def summarize(calls: int, failures: int, histogram: list[int], windows: Windows) -> WindowSummary:
    total = sum(histogram)
    p95_ms: float | None = None
    if total:
        needed = 0.95 * total
        running = 0
        for b, count in enumerate(histogram):
            running += count
            if running >= needed:
                p95_ms = float(LATENCY_BOUNDS_MS[b]) if b < len(LATENCY_BOUNDS_MS) else None
                if p95_ms is None:  # beyond the last bound
                    p95_ms = float(LATENCY_BOUNDS_MS[-1])
                break
    window_minutes = windows.failure_window_s / 60
    return WindowSummary(
        calls=calls,
        failures=failures,
        failure_rate_pct=round(100 * failures / calls, 1) if calls else 0.0,
        p95_ms=p95_ms,
        calls_per_minute=round(calls / window_minutes, 1) if window_minutes else 0.0,
    )
