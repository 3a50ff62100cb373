"""Shared state: breakers, call statistics, budget counters, cached answers, the config
version, the sentinel's health verdicts, the background jobs' locks and the front doors' last
refusals (`refusal_log`).

`MemoryStore` (in `memory_store`) keeps them in this process (the embedded mode); `RedisStore`
(in `redis_store`) keeps them in Redis with atomic scripts, so several serving processes behave
as one; `ResilientStore` (in `resilient_store`) is Redis with this process's memory standing in
while Redis is down. They answer the same contract and run the same test suite. Breaker
semantics live in `breaker.py`; a store only applies them: counters, compare-and-set
transitions and bounded probe slots.

The statistics are kept in buckets of `Windows.bucket_s` seconds per provider: calls (`c`),
breaker failures (`f`), slow calls (`s`), calls over the p95 limit (`p`) and the latency
histogram's bins (`histogram`). An operator's `set_mode` starts them afresh.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.engine.breaker import BreakerState, Mode, WindowStats
from gateway.engine.budgets import Hold, budget_period
from gateway.engine.health import HealthState
from gateway.engine.rate import Limits, RateKeys
from gateway.state import histogram
from gateway.state.refusal_log import REFUSALS_KEPT, RefusalNote


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished call, as the statistics count it."""

    ok: bool
    failure: bool  # counts as a breaker failure
    slow: bool
    over_p95: bool
    latency_ms: float
    # False for a call already counted while it was still in flight (a stuck call that ends
    # after all): its end adds its spend and drops its holds, but isn't a second call.
    counted: bool = True


@dataclass(frozen=True, slots=True)
class SpendIncrement:
    key: str
    amount: float
    ttl_s: int


@dataclass(frozen=True, slots=True)
class HoldRelease:
    """A call's holds to drop (`StateStore.reserve` took them under `holder`)."""

    holder: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StandingTake:
    """Holds for a process's next call, taken by `record` after it settles this one, if each
    fits its `limit` (a share of the hard stop); they lapse `life_s` after `now`."""

    holder: str
    holds: tuple[Hold, ...]
    life_s: float


@dataclass(frozen=True, slots=True)
class Reserved:
    """What `reserve` answers: why not ("" when every hold was taken), and each counter's
    settled spend and its holds (this call's included, when taken) as they then were."""

    refusal: str
    spent: dict[str, float]
    held: dict[str, float]


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


@dataclass(frozen=True, slots=True)
class Recorded:
    """What `record` answers: all a request needs after its call, and the next one before."""

    state: BreakerState  # as the breaker now is, with its health verdict, as `read` gives it
    stats: WindowStats | None  # the window sums, when asked for
    spent: dict[str, float]  # every spend key read or incremented, after the increments
    standing_taken: bool = False  # the `standing` holds asked for were taken
    slot_taken: bool = False  # the `slot` asked for was counted


@dataclass(frozen=True, slots=True)
class RecordCall:
    """A finished call to count on `name`'s breaker (and what goes in the same step): its spend
    increments, the answer to cache, the spend keys to read back, the call's holds to release,
    the standing holds to take for this process's next call, a rate slot to count ahead for its
    caller's next request. `probe_version`: the half-open
    version that admitted it when it was a probe. `want_stats`: the window sums are needed."""

    name: str
    sample: Sample
    now: float
    windows: Windows
    want_stats: bool
    probe_version: int | None = None
    spend: tuple[SpendIncrement, ...] = ()
    cache: CacheWrite | None = None
    read_spend: tuple[str, ...] = ()
    release: HoldRelease | None = None
    standing: StandingTake | None = None
    slot: SlotTake | None = None


@dataclass(frozen=True, slots=True)
class SlotTake:
    """One request of a rate subject counted ahead, for this process's next request of it
    (`gateway.routing.rate_slots`), if the window stays within `caps` with it (`rate.judge`'s
    rule; a cap of 0 is no cap)."""

    keys: RateKeys
    caps: Limits


@dataclass(frozen=True, slots=True)
class StatusRead:
    """The status page's view of several providers, read in one round trip."""

    breakers: dict[str, BreakerState]  # with health; a provider never seen: BreakerState()
    summaries: dict[str, WindowSummary]
    spent: dict[str, float]


def spend_key(budget_id: int, period: str, now: float, zone: str = "UTC") -> tuple[str, int]:
    """The counter of one budget for the calendar day or month (in `zone`) that `now` falls
    in, and its time to live: a day past the period's end."""
    current = budget_period(period, now, zone)
    return f"spend:{budget_id}:{current.label}", max(60, round(current.end - now) + 86_400)


class StateStore(ABC):
    backend: str

    @abstractmethod
    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        """A provider's breaker and the named spend counters, in one round trip."""

    @abstractmethod
    async def record(self, call: RecordCall) -> Recorded:
        """Count a finished call (and its spend) atomically, in one round trip; answers the
        breaker as it now is (with its health verdict), the window sums when asked (calls
        since the breaker last closed and since the last `set_mode` only), and the value of
        every spend key in `spend` and `read_spend` after the increments: what the next
        admission needs. A probe's success counts toward closing only if the breaker is still
        at the half-open version that admitted it. `cache` is stored in the same round trip,
        as `cache_put` would. `release` drops the call's budget holds in the same step as its
        spend is added, so no other call ever sees it counted twice or not at all. `standing`
        then takes holds for this process's next call, all of them or none, by `reserve`'s rule
        (`gateway.routing.standing`)."""

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
        """An operator's override; also the way back to AUTO. Resets the breaker to CLOSED and
        starts its statistics afresh: calls counted before it no longer count, neither toward
        tripping it (`record`'s sums) nor in `summary`."""

    async def summary(self, name: str, windows: Windows, now: float) -> WindowSummary:
        """What the status page shows of one provider's recent calls (`status_read`'s)."""
        return (await self.status_read([name], windows=windows, now=now)).summaries[name]

    @abstractmethod
    async def status_read(
        self,
        names: Sequence[str],
        *,
        windows: Windows,
        now: float,
        spend_keys: Iterable[str] = (),
    ) -> StatusRead:
        """Every named provider's breaker (with health, as `read` gives it) and summary (as
        `summary` gives it), and the named spend counters, in one round trip."""

    @abstractmethod
    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        """Raise a spend counter to at least `amount`, the ledger's figure: a counter lost with
        a Redis restart comes back, one ahead of the (batched) ledger is kept as it is."""

    @abstractmethod
    async def reserve(
        self, holder: str, holds: Sequence[Hold], *, now: float, life_s: float
    ) -> Reserved:
        """Take every hold under `holder` for `life_s` if each fits its budget
        (`budgets.hold_refusal` against the counter's spend plus every live hold on it), or
        none: atomic across processes, so calls admitted at once can't together pass a cap.
        Lapsed holds (their process died mid-call) are dropped first. Time is the store's own
        (Redis's clock; `now` for the in-process store), never a caller's: one process's
        clock running ahead can't drop another's live holds."""

    @abstractmethod
    async def release(self, holder: str, keys: Iterable[str]) -> None:
        """Drop `holder`'s holds on these counters (a call that never reached `record`: lost
        a hedged race, or was abandoned)."""

    @abstractmethod
    async def holds_read(self, keys: Iterable[str], *, now: float) -> dict[str, tuple[int, float]]:
        """Each counter's live holds: how many, and their sum."""

    @abstractmethod
    async def rate_take(
        self,
        keys: RateKeys,
        limits: Limits,
        *,
        ttl_s: int,
        check: bool = True,
        amount: int = 1,
    ) -> tuple[bool, dict[str, float]]:
        """Count one request against a subject's rate window if it fits (`rate.judge`'s rule,
        applied atomically: across processes no two requests take the same last slot), or
        unconditionally with `check=False` (`amount` -n with it gives n counted requests back).
        Answers whether it was counted and the four counters as they then are. A steady
        request is admitted on a slot an earlier one's `record` counted ahead (`SlotTake`);
        this is the check of every other."""

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
        loading_grace_s: float = 0.0,
    ) -> HealthState:
        """Add one check's result to the provider's window of the last `window` and apply
        `health.next_health` atomically; returns the verdict. Kept apart from the breaker
        (whose writes never touch it) and read with it by `read`. With `ttl_s`, the verdict
        lapses to unknown when no result follows within that long. `loading_grace_s` > 0:
        the result says the model is loading (`next_health`)."""

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
    async def refusal_add(self, note: RefusalNote) -> None:
        """Keep a front door's refusal at the head of the shared list, the oldest past
        `REFUSALS_KEPT` dropped: one write, which no request waits for."""

    @abstractmethod
    async def refusals_read(self, count: int = REFUSALS_KEPT) -> list[RefusalNote]:
        """The last `count` refusals kept, newest first."""

    @abstractmethod
    async def config_version(self) -> int: ...

    @abstractmethod
    def bump_config_version(self) -> int:
        """Sync, for the admin: move the version so every process rebuilds its snapshot."""

    def health(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": True}

    async def aclose(self) -> None:  # noqa: B027 - most stores hold no connections
        """Release this loop's connections (on shutdown)."""


def summarize(
    buckets: Iterable[tuple[int, Mapping[str, int | str]]], windows: Windows, now: float
) -> WindowSummary:
    """The summary of a provider's buckets, given as (bucket index, fields): calls and failures
    in the failure window, the p95 (`histogram.p95_ms`) of the calls in the p95 window."""
    index = windows.bucket(now)
    failure_from = index - windows.buckets_in(windows.failure_window_s)
    p95_from = index - windows.buckets_in(windows.p95_window_s)
    calls = failures = 0
    bins: dict[int, int] = {}
    for i, bucket in buckets:
        if failure_from < i <= index:
            calls += int(bucket.get("c", 0))
            failures += int(bucket.get("f", 0))
        if p95_from < i <= index:
            for b, count in histogram.bins_of(bucket):
                bins[b] = bins.get(b, 0) + count
    window_minutes = windows.failure_window_s / 60
    return WindowSummary(
        calls=calls,
        failures=failures,
        failure_rate_pct=round(100 * failures / calls, 1) if calls else 0.0,
        p95_ms=histogram.p95_ms(bins),
        calls_per_minute=round(calls / window_minutes, 1) if window_minutes else 0.0,
    )
