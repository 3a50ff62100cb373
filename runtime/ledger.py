"""The call ledger's writer in a serving process: one CallRecord per routed request, written
in batches off the request's path (every second, or at 1,000 rows) and flushed on shutdown.

A request only appends to a list; a background task does the SQL. What a failed write means
decides what becomes of the rows:

- The database unreachable or unable to write (`transient`): the batch is kept and tried
  again, and inserting is idempotent (a record already written is skipped), so a retry never
  duplicates one. Records that can't reach the database at shutdown, or that pile up past
  SPILL_AFTER during an outage, go to files under DATA_DIR/ledger-spill and are written from
  there once the database answers.
- Anything else is about the rows: the batch is halved until the rows the database takes are
  written, and a row it still refuses on its own is set aside in DATA_DIR/ledger-rejected (the
  spill files' format: moved back into ledger-spill, it is written at the next start), with an
  error line naming it and an operator alert. One bad row never holds up the others.

A lost record is a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, InterfaceError, OperationalError

from alerts.raising import ledger_rows_rejected
from billing.ledger import write_records
from gateway.aio import LoopLocal, spawn
from runtime.background import run_db

logger = logging.getLogger(__name__)

Row = dict[str, Any]

# What PostgreSQL says about itself rather than about a row, beyond the OperationalError and
# InterfaceError that its connection, shutdown, resource, lock and serialization errors become
# through Django: a read-only standby (after a database failover), and a table, column or grant
# not in place yet (a deploy half done). No row causes these, so the rows wait.
_DATABASE_STATES = frozenset({"25006", "42P01", "42703", "42501"})


def transient(exc: BaseException) -> bool:
    """True when a failed write says nothing about its rows: they wait and are tried again."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return isinstance(exc, DatabaseError) and sqlstate in _DATABASE_STATES


def spill_dir() -> Path:
    return Path(settings.DATA_DIR) / "ledger-spill"


def rejected_dir() -> Path:
    return Path(settings.DATA_DIR) / "ledger-rejected"


class _Encoder(DjangoJSONEncoder):
    """The spill files' encoding; a value JSON can't hold is kept as its repr rather than
    making its whole file unwritable."""

    def default(self, o: Any) -> Any:
        try:
            return super().default(o)
        except TypeError:
            return repr(o)


def _encode(row: Any) -> str:
    return json.dumps(row, cls=_Encoder)


def _write_lines(directory: Path, lines: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{int(time.time() * 1000)}-{os.getpid()}.jsonl"
    with path.open("a", encoding="utf-8") as out:  # "a": one in the same millisecond adds to it
        out.writelines(line + "\n" for line in lines)
    return path


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]


@dataclass
class Refused:
    line: str  # as it goes into the file
    request_id: str
    error: str


@dataclass
class Written:
    refused: list[Refused]
    left: list[Row]  # not written: a transient failure stopped the batch
    failure: BaseException | None = None


def write_or_refuse(rows: list[Row]) -> Written:
    """Write `rows`, halving a batch the database refuses until every row it takes is written
    and each one it still refuses alone is named; stop at a transient failure (ORM code: run
    it off the event loop)."""
    done = Written(refused=[], left=[])
    todo = [rows]
    while todo:
        part = todo.pop()
        try:
            write_records(part)
        except Exception as exc:
            if transient(exc):
                done.left = [row for chunk in (part, *reversed(todo)) for row in chunk]
                done.failure = exc
                return done
            if len(part) > 1:
                middle = len(part) // 2
                todo += [part[middle:], part[:middle]]  # the first half first
                continue
            [row] = part
            request_id = row.get("request_id") if isinstance(row, dict) else None
            done.refused.append(Refused(_encode(row), str(request_id), _describe(exc)))
    return done


class LedgerWriter:
    # Rows a transaction: each flush has a fixed cost (a connection, a commit, a thread hop)
    # that smaller batches pay more often; at 200 the embedded mode spent a tenth of a
    # request's CPU on it under load.
    MAX_BATCH = 1000
    FLUSH_EVERY_S = 1.0
    RETRY_AFTER_S = 2.0
    # Past this many records waiting on an unreachable database, they wait on disk instead.
    SPILL_AFTER = 50_000
    STOP_TIMEOUT_S = 10.0

    def __init__(self) -> None:
        self._pending: list[Row] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._wake: LoopLocal[asyncio.Event] = LoopLocal(asyncio.Event)
        self._tasks: LoopLocal[list[asyncio.Task[None]]] = LoopLocal(list)
        # One write at a time: an explicit flush waits for the one in flight.
        self._writing: LoopLocal[asyncio.Lock] = LoopLocal(asyncio.Lock)
        self._alerts: LoopLocal[set[asyncio.Task[None]]] = LoopLocal(set)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, row: Row) -> None:
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
        """Write what is queued now, a batch at a time; True when none of it is left behind
        (written, or refused by the database and set aside). (Records queued meanwhile wait
        for the next flush: chasing them would turn a busy second into a stream of tiny
        transactions.)"""
        async with self._writing.get():
            with self._lock:
                rows, self._pending = self._pending, []
            for start in range(0, len(rows), self.MAX_BATCH):
                done = await run_db(write_or_refuse, rows[start : start + self.MAX_BATCH])
                self._set_aside(done.refused, "the queue")
                if done.failure is not None:
                    left = done.left + rows[start + self.MAX_BATCH :]
                    logger.error(
                        "ledger: %d records not written yet; retrying",
                        len(left),
                        exc_info=done.failure,
                    )
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
        if alerts := self._alerts.peek():
            await asyncio.wait(set(alerts), timeout=self.STOP_TIMEOUT_S)

    def _spill(self) -> None:
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows:
            return
        path = _write_lines(spill_dir(), [_encode(row) for row in rows])
        logger.error("ledger: database unreachable; %d records kept in %s", len(rows), path)

    def _set_aside(self, refused: list[Refused], source: str) -> None:
        """Keep what the database refused for an operator: a file, a log line each, an alert."""
        if not refused:
            return
        path = _write_lines(rejected_dir(), [item.line for item in refused])
        for item in refused:
            logger.error(
                "ledger: record %s from %s refused by the database (%s); set aside in %s",
                item.request_id, source, item.error, path,
            )  # fmt: skip
        task = spawn(self._alert(len(refused), str(path), refused[0].error))
        alerts = self._alerts.get()
        alerts.add(task)
        task.add_done_callback(alerts.discard)

    @staticmethod
    async def _alert(count: int, path: str, error: str) -> None:
        try:
            await run_db(ledger_rows_rejected, count, path, error)
        except Exception:  # the file and the log lines are kept whatever becomes of the alert
            logger.exception("ledger: the alert for %s could not be raised", path)

    async def replay_spilled(self) -> None:
        """Write records an earlier run (or this one) left on disk, then remove the files;
        rows the database refuses (or lines that aren't records) are set aside. Only the
        database unreachable keeps a file for later."""
        directory = spill_dir()
        if not directory.is_dir():
            return
        for path in sorted(directory.glob("*.jsonl")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue  # another process took it
            rows: list[Row] = []
            refused: list[Refused] = []  # lines that aren't records, then rows refused
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    refused.append(Refused(line, f"(line {number})", _describe(exc)))
            written = 0
            for start in range(0, len(rows), self.MAX_BATCH):
                done = await run_db(write_or_refuse, rows[start : start + self.MAX_BATCH])
                if done.failure is not None:
                    # What was refused is found again next time: set nothing aside twice.
                    logger.error(
                        "ledger: %s not written yet; kept for the next start",
                        path,
                        exc_info=done.failure,
                    )
                    return
                refused += done.refused
                written += len(rows[start : start + self.MAX_BATCH]) - len(done.refused)
            self._set_aside(refused, str(path))  # before the unlink: a crash keeps both
            path.unlink(missing_ok=True)
            logger.warning("ledger: wrote %d spilled records from %s", written, path)
