"""The serving process's current configuration snapshot, rebuilt when the config version moves.

The snapshot itself (`providers.engine.config.Snapshot`) is plain data; it is read from the
database by `providers.selectors.snapshot_build`. This module decides when: at once for a change
made in this process, within `POLL_S` for one made in another, and never on a request's path
except the very first one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from billing.selectors import budget_spend
from failover_site.runtime.background import run_db
from providers.aio import LoopLocal, spawn
from providers.engine.clock import Clock
from providers.engine.config import Snapshot
from providers.selectors import snapshot_build
from providers.state.contract import StateStore, spend_key

logger = logging.getLogger(__name__)


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
                snapshot = await run_db(snapshot_build, version=version)
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
