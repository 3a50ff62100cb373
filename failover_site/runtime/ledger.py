"""The call ledger's writer in a serving process: one CallRecord per routed request, written
in batches off the request's path (every second, or at 200 rows) and flushed on shutdown.

A request only appends to a list; a background task does the SQL. A batch that fails to write
is kept and tried again, and inserting is idempotent (a record already written is skipped), so
a retry never duplicates one. Records that can't reach the database at shutdown, or that pile up
past SPILL_AFTER during an outage, go to files under DATA_DIR/ledger-spill and are written from
there once the database answers: a lost record is a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from billing.ledger import write_records
from failover_site.runtime.background import run_db
from providers.aio import LoopLocal, spawn

logger = logging.getLogger(__name__)


def spill_dir() -> Path:
    return Path(settings.DATA_DIR) / "ledger-spill"


class LedgerWriter:
    MAX_BATCH = 200
    FLUSH_EVERY_S = 1.0
    RETRY_AFTER_S = 2.0
    # Past this many records waiting on an unreachable database, they wait on disk instead.
    SPILL_AFTER = 50_000
    STOP_TIMEOUT_S = 10.0

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._wake: LoopLocal[asyncio.Event] = LoopLocal(asyncio.Event)
        self._tasks: LoopLocal[list[asyncio.Task[None]]] = LoopLocal(list)
        # One write at a time: an explicit flush waits for the one in flight.
        self._writing: LoopLocal[asyncio.Lock] = LoopLocal(asyncio.Lock)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, row: dict[str, Any]) -> None:
        """Queue one record (CallRecord field values). Never blocks, never touches the DB."""
        with self._lock:
            self._pending.append(row)
            full = len(self._pending) >= self.MAX_BATCH
        tasks = self._tasks.get()
        if not tasks or tasks[0].done():
            tasks[:] = [spawn(self._run())]
        if full:
            self._wake.get().set()

    async def _run(self) -> None:
        wake = self._wake.get()
        await self.replay_spilled()
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.FLUSH_EVERY_S)
            wake.clear()
            if await self.flush():
                continue
            if len(self) > self.SPILL_AFTER:
                self._spill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.RETRY_AFTER_S)

    async def flush(self) -> bool:
        """Write what is queued now, a batch at a time; True when none of it is left behind.
        (Records queued meanwhile wait for the next flush: chasing them would turn a busy
        second into a stream of tiny transactions.)"""
        async with self._writing.get():
            with self._lock:
                rows, self._pending = self._pending, []
            for start in range(0, len(rows), self.MAX_BATCH):
                try:
                    await run_db(write_records, rows[start : start + self.MAX_BATCH])
                except Exception:  # any failure keeps the rows: an outage, or a bug to fix
                    left = rows[start:]
                    logger.exception("ledger: %d records not written yet; retrying", len(left))
                    with self._lock:
                        self._pending[:0] = left
                    return False
            return True

    async def aclose(self) -> None:
        """Shutdown: let the background writer finish, write the rest, spill what can't be."""
        self._stopping = True
        for task in self._tasks.peek() or []:
            self._wake.get().set()
            try:
                await asyncio.wait_for(asyncio.shield(task), self.STOP_TIMEOUT_S)
            except TimeoutError:
                task.cancel()
        if not await self.flush():
            self._spill()

    def _spill(self) -> None:
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows:
            return
        directory = spill_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{int(time.time() * 1000)}-{os.getpid()}.jsonl"
        with path.open("w", encoding="utf-8") as spill:
            for row in rows:
                spill.write(json.dumps(row, cls=DjangoJSONEncoder) + "\n")
        logger.error("ledger: database unreachable; %d records kept in %s", len(rows), path)

    async def replay_spilled(self) -> None:
        """Write records an earlier run (or this one) left on disk, then remove the files."""
        directory = spill_dir()
        if not directory.is_dir():
            return
        for path in sorted(directory.glob("*.jsonl")):
            try:
                rows = [json.loads(line) for line in path.read_text().splitlines() if line]
            except FileNotFoundError:
                continue  # another process took it
            try:
                for start in range(0, len(rows), self.MAX_BATCH):
                    await run_db(write_records, rows[start : start + self.MAX_BATCH])
            except Exception:
                logger.exception("ledger: %s not written yet; kept for the next start", path)
                return
            path.unlink(missing_ok=True)
            logger.warning("ledger: wrote %d spilled records from %s", len(rows), path)
