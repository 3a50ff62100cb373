"""The serving process's parts, made once: state store, config snapshot, adapters, ledger.

`get_gateway()` is what the views use. Tests build their own `Gateway` with a fake clock or a
particular store and install it with `set_gateway()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from billing.ledger import LedgerWriter

from .background import run_db, spawn
from .loop_local import LoopLocal
from .pool import AdapterPool
from .snapshot import Snapshot, build_snapshot
from .state import StateStore, spend_key
from .state_memory import MemoryStore

logger = logging.getLogger(__name__)


@dataclass
class Clock:
    """Wall time (shared across processes: breaker deadlines) and monotonic time (one
    request's own deadline). Tests pass a clock they move by hand."""

    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic


@dataclass
class _LoopState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    poller: asyncio.Task[None] | None = None
    rebuild: asyncio.Task[None] | None = None


class SnapshotHolder:
    """The current immutable snapshot. When the config version moves (at once for a change
    made in this process, within POLL_S for one made in another) it is rebuilt in the
    background while requests go on with the one they have: a request never waits for SQL,
    except the very first of the process, which has nothing else to go on."""

    POLL_S = 0.5
    # The first build may wait this long for the database; a failed rebuild is retried after
    # RETRY_S while the old snapshot keeps serving.
    FIRST_BUILD_TIMEOUT_S = 10.0
    RETRY_S = 1.0
    SEED_EVERY_S = 30.0

    def __init__(self, store: StateStore, clock: Clock | None = None) -> None:
        self.store = store
        self.clock = clock or Clock()
        self._snapshot: Snapshot | None = None
        self._stale = True
        self._loop_state: LoopLocal[_LoopState] = LoopLocal(_LoopState)

    def mark_stale(self) -> None:
        self._stale = True

    async def current(self) -> Snapshot:
        state = self._loop_state.get()
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = await asyncio.wait_for(self.refresh(), self.FIRST_BUILD_TIMEOUT_S)
        elif self._stale and (state.rebuild is None or state.rebuild.done()):
            state.rebuild = spawn(self._rebuild())
        if state.poller is None or state.poller.done():
            state.poller = spawn(self._poll())
        return snapshot

    async def refresh(self) -> Snapshot:
        """Build a snapshot from the database now (tests and the first request wait for it)."""
        state = self._loop_state.get()
        async with state.lock:
            if self._snapshot is not None and not self._stale:
                return self._snapshot  # another request rebuilt it while this one waited
            self._stale = False  # a change committed during the build marks it stale again
            try:
                version = await self.store.config_version()
                snapshot = await run_db(build_snapshot, version)
                await self._seed_spend(snapshot)
            except BaseException:
                self._stale = True
                raise
            self._snapshot = snapshot
            return snapshot

    async def _rebuild(self) -> None:
        try:
            await self.refresh()
        except Exception:  # the database or Redis: keep serving the snapshot we have
            logger.exception("configuration snapshot rebuild failed; retrying")
            await asyncio.sleep(self.RETRY_S)

    async def _seed_spend(self, snapshot: Snapshot) -> None:
        """Counters missing from the store (a restart, a flushed Redis) start from the ledger."""
        from billing.selectors import budget_spend

        now = self.clock.wall()
        for budget in snapshot.budgets:
            key, ttl = spend_key(budget.id, budget.period, now)
            spent = await run_db(budget_spend, budget_id=budget.id, now=now)
            await self.store.seed_spend(key, float(spent), ttl)

    async def aclose(self) -> None:
        state = self._loop_state.peek()
        if state is not None:
            for task in (state.poller, state.rebuild):
                if task is not None:
                    task.cancel()

    async def _poll(self) -> None:
        polls_per_seed = max(1, round(self.SEED_EVERY_S / self.POLL_S))
        polls = 0
        while True:
            await asyncio.sleep(self.POLL_S)
            polls += 1
            if polls % polls_per_seed == 0 and self._snapshot is not None:
                # Counters lost with Redis (or kept only locally during its outage) come back
                # from the ledger within this long.
                try:
                    await self._seed_spend(self._snapshot)
                except Exception:
                    logger.exception("budget counters could not be checked against the ledger")
            try:
                version = await self.store.config_version()
            except Exception:  # the store falls back on its own; never let the poller die
                logger.exception("config version poll failed")
                continue
            if self._snapshot is not None and version != self._snapshot.version:
                self._stale = True
            if self._stale:
                # Rebuilt now, not when the next request comes: a change reaches every
                # process within a poll and a build, however quiet its traffic.
                await self._rebuild()


class Gateway:
    def __init__(
        self,
        *,
        store: StateStore,
        clock: Clock | None = None,
        ledger: LedgerWriter | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or Clock()
        self.snapshots = SnapshotHolder(store, self.clock)
        self.adapters = AdapterPool()
        self.ledger = ledger or LedgerWriter()

    async def aclose(self) -> None:
        """Shutdown: write what the ledger holds, close the provider clients."""
        try:
            await self.snapshots.aclose()
            await self.ledger.aclose()
        finally:
            try:
                await self.adapters.aclose()
            finally:
                await self.store.aclose()


_gateway: Gateway | None = None


def make_store() -> StateStore:
    if settings.REDIS_URL:
        from .state_redis import RedisStore
        from .state_resilient import ResilientStore

        return ResilientStore(RedisStore(settings.REDIS_URL))
    return MemoryStore()


def get_gateway() -> Gateway:
    global _gateway
    if _gateway is None:
        _gateway = Gateway(store=make_store())
    return _gateway


def set_gateway(gateway: Gateway | None) -> None:
    global _gateway
    _gateway = gateway


def config_changed() -> None:
    """A control-plane change committed: every process rebuilds its snapshot (this one now)."""
    gateway = get_gateway()
    gateway.store.bump_config_version()
    gateway.snapshots.mark_stale()
