"""The serving process's current configuration snapshot, rebuilt when the config version moves.

The snapshot itself (`gateway.engine.config.Snapshot`) is plain data; it is read from the
database by `providers.selectors.snapshot_build`. This module decides when: at once for a change
made in this process, within `POLL_S` for one made in another, and never on a request's path
except the very first one.

Another process's change is seen through the shared config version (a Redis key) in production,
and through the database's own record of changes in the embedded mode, where the version lives
in each process's memory and a `manage.py` command or a second server would otherwise go unseen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import Error as DatabaseError

from billing.models import Budget
from billing.selectors import budget_spend
from gateway.aio import LoopLocal, spawn
from gateway.engine.budgets import budget_period
from gateway.engine.clients import Clients
from gateway.engine.clock import Clock
from gateway.engine.config import BudgetConfig, Snapshot
from gateway.state.contract import StateStore, spend_key
from providers.selectors import config_change_high_water, snapshot_build
from runtime.background import run_db
from runtime.key_lookup import KeyLookup

logger = logging.getLogger(__name__)

HighWater = tuple[int, int]  # `config_change_high_water()`: where the change record stands


def _build(*, version: int, watch_database: bool) -> tuple[Snapshot, HighWater | None]:
    # The change record is read before the configuration: a change committed in between is
    # in the snapshot and still looks new to the next poll (one rebuild too many, none missed).
    high_water = config_change_high_water() if watch_database else None
    return snapshot_build(version=version, budgets=budget_configs()), high_water


def budget_configs() -> tuple[BudgetConfig, ...]:
    """The enabled budgets as the engine reads them (its snapshot's `budgets`)."""
    return tuple(
        BudgetConfig(
            id=row.pk,
            scope=row.scope,
            period=row.period,
            cap=row.cap,
            warn_pct=row.warn_pct,
            high_priority_only_pct=row.high_priority_only_pct,
            hard_stop_pct=row.hard_stop_pct,
            provider=row.provider.name if row.provider is not None else "",
            client=row.client_app.name if row.client_app is not None else "",
            unit=row.unit,
        )
        for row in Budget.objects.filter(enabled=True).select_related("provider", "client_app")
        # A client's budget whose app is gone caps nothing.
        if row.scope != "client" or row.client_app is not None
    )


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

    def __init__(
        self,
        store: StateStore,
        clock: Clock | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or Clock()
        # Called when a new version is swapped in: any change, by any process (an operator's
        # breaker override among them), and what the process remembers of the state is stale.
        self.on_change = on_change
        self._snapshot: Snapshot | None = None
        self._stale = True
        self._loop_state: LoopLocal[_LoopState] = LoopLocal(_LoopState)
        # Where the change record stood when the current snapshot was read (embedded mode).
        self._built_at: HighWater | None = None
        self._record_unreadable = False
        # Keys made since the snapshot was read are found in the database before a refusal.
        self.keys = KeyLookup(self.clock, on_found=self.refresh_soon)

    @property
    def watches_database(self) -> bool:
        """Whether the poller also reads the database's record of changes. Only in the embedded
        mode: there the config version is this process's memory, which another process's change
        (a `manage.py` command, a second server on the same SQLite file) never moves. With Redis
        every process shares the version and each commit moves it, so polling that one key is
        enough, and a SQL query per poll per worker would be load on PostgreSQL for nothing.
        Read from the store each time: a test may swap the holder's store."""
        return self.store.backend == "memory"

    def mark_stale(self) -> None:
        self._stale = True

    def refresh_soon(self) -> None:
        """Rebuild in the background now, not at the next poll (the database knew something
        the snapshot didn't); requests meanwhile go on with the one they have."""
        self._stale = True
        state = self._loop_state.get()
        if state.rebuild is None or state.rebuild.done():
            state.rebuild = spawn(self._rebuild())

    async def client_find(self, digest: str) -> Clients:
        """What the database says of a key (by its digest) the current snapshot doesn't know:
        bounded, see `KeyLookup`; a key found there asks for a new snapshot."""
        return await self.keys.find(digest, self._snapshot)

    def latest(self) -> Snapshot | None:
        """The snapshot requests now route on, without waiting (None before the first), for
        sync code on the event loop (CORS's origin check); one that is stale, or missing, is
        rebuilt in the background as `current` would, so the next caller has it."""
        state = self._loop_state.get()
        if (self._snapshot is None or self._stale) and (
            state.rebuild is None or state.rebuild.done()
        ):
            state.rebuild = spawn(self._rebuild())
        if state.poller is None or state.poller.done():
            state.poller = spawn(self._poll())
        return self._snapshot

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
                snapshot, built_at = await run_db(
                    _build, version=version, watch_database=self.watches_database
                )
                await self._seed_spend(snapshot)
            except BaseException:
                self._stale = True
                raise
            moved = self._snapshot is not None and self._snapshot.version != snapshot.version
            self._snapshot, self._built_at = snapshot, built_at
            if moved and self.on_change is not None:
                self.on_change()
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
            zone = snapshot.policy.time_zone
            key, ttl = spend_key(budget.id, budget.period, now, zone)
            since = datetime.fromtimestamp(budget_period(budget.period, now, zone).start, UTC)
            spent = await run_db(budget_spend, budget_id=budget.id, since=since)
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
            await self.poll_once()

    async def poll_once(self) -> None:
        """One look for a change committed anywhere, and the rebuild if there was one."""
        try:
            version = await self.store.config_version()
        except Exception:  # the store falls back on its own; never let the poller die
            logger.exception("config version poll failed")
            return
        if self._snapshot is not None and version != self._snapshot.version:
            self._stale = True
        if self.watches_database and not self._stale and await self._record_moved():
            # Another process's change: this process's version moves as if it had made it, so
            # the new snapshot's version (the status endpoint's `config_version`) moves too.
            self.store.bump_config_version()  # the memory store's: no I/O
            self._stale = True
        if self._stale:
            # Rebuilt now, not when the next request comes: a change reaches every
            # process within a poll and a build, however quiet its traffic.
            await self._rebuild()

    async def _record_moved(self) -> bool:
        """Whether the change record moved since the current snapshot was read. A database
        that can't be read is logged once and counts as no change: the snapshot we have keeps
        serving, and the poll goes on."""
        if self._built_at is None:
            return False
        try:
            high_water = await run_db(config_change_high_water)
        except DatabaseError as exc:
            if not self._record_unreadable:
                logger.warning(
                    "the change record could not be read (%s): other processes' changes wait "
                    "until it can",
                    exc,
                )
                self._record_unreadable = True
            return False
        if self._record_unreadable:
            logger.warning("the change record can be read again")
            self._record_unreadable = False
        return high_water != self._built_at
