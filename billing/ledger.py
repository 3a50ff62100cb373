"""The call ledger's writer: one CallRecord per routed request, written in batches off the
request's path (every second, or at 200 rows) and flushed on shutdown.

A request only appends to a list; a background task does the SQL. A batch that fails to write
is kept and tried again: a lost record is a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from datetime import datetime
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections, models, router, transaction
from django.db.models import F

from providers.background import run_db, spawn
from providers.loop_local import LoopLocal

from .models import CallRecord

logger = logging.getLogger(__name__)


class LedgerWriter:
    MAX_BATCH = 200
    FLUSH_EVERY_S = 1.0
    RETRY_AFTER_S = 2.0

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
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
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.FLUSH_EVERY_S)
            wake.clear()
            if not await self.flush():
                await asyncio.sleep(self.RETRY_AFTER_S)

    async def flush(self) -> bool:
        """Write everything queued; True when nothing is left behind."""
        async with self._writing.get():
            with self._lock:
                rows, self._pending = self._pending, []
            if not rows:
                return True
            try:
                await run_db(write_records, rows)
            except DatabaseError:
                logger.exception("ledger: %d records not written yet; retrying", len(rows))
                with self._lock:
                    self._pending[:0] = rows
                return False
            return True

    async def aclose(self) -> None:
        for task in self._tasks.peek() or []:
            task.cancel()
        if not await self.flush():
            logger.error("ledger: %d records could not be written at shutdown", len(self))


def write_records(rows: list[dict[str, Any]]) -> None:
    """One transaction: the records, and the static answers' hit counts they carry."""
    from providers.models import StaticAnswer

    hits: Counter[int] = Counter()
    last_hit: dict[int, datetime] = {}
    for row in rows:
        answer_id = row.get("static_answer_id")
        if answer_id is not None:
            hits[answer_id] += 1
            last_hit[answer_id] = max(last_hit.get(answer_id, row["created_at"]), row["created_at"])
    with transaction.atomic():
        if hits:
            # An answer deleted since the request keeps its records, without the link.
            existing = set(StaticAnswer.objects.filter(pk__in=hits).values_list("pk", flat=True))
            for row in rows:
                if row.get("static_answer_id") not in existing:
                    row["static_answer_id"] = None
            for answer_id in existing:
                StaticAnswer.objects.filter(pk=answer_id).update(
                    hit_count=F("hit_count") + hits[answer_id], last_hit_at=last_hit[answer_id]
                )
        _insert(rows)


def _insert(rows: list[dict[str, Any]]) -> None:
    """One multi-row INSERT: the same rows `bulk_create` would write, without a model instance
    and an SQL compiler per row (several times the CPU, taken from the serving process). Values
    the backend must adapt (times, UUIDs, JSON, decimals) go through the field's own
    preparation; text, numbers and flags go as they are."""
    db = connections[router.db_for_write(CallRecord)]
    fields = [field for field in CallRecord._meta.concrete_fields if not field.primary_key]
    plain = (models.CharField, models.TextField, models.IntegerField, models.BooleanField)
    quote = db.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(CallRecord._meta.db_table),
        ", ".join(quote(str(field.column)) for field in fields),
        ", ".join(["%s"] * len(fields)),
    )
    columns = [
        (field, None if isinstance(field, plain) else field.get_db_prep_save) for field in fields
    ]
    params = [
        [
            value if prepare is None else prepare(value, db)
            for field, prepare in columns
            for value in (row[field.attname] if field.attname in row else field.get_default(),)
        ]
        for row in rows
    ]
    with db.cursor() as cursor:
        cursor.executemany(sql, params)
