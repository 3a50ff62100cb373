"""The call ledger's rows as the database takes them: one transaction per batch, idempotent.

The buffering, batching, retrying and spilling of a serving process are the runtime's
(`runtime.ledger.LedgerWriter`); this is the SQL it runs.
"""

from __future__ import annotations

import operator
from collections import Counter
from datetime import datetime
from typing import Any

from django.db import connections, models, router, transaction
from django.db.models import F

from billing.models import CallRecord
from providers.models import StaticAnswer


def write_records(rows: list[dict[str, Any]]) -> None:
    """One transaction: the records, and the static answers' hit counts they carry."""
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
    """Multi-row INSERTs: the same rows `bulk_create` would write, without a model instance
    and an SQL compiler per row (several times the CPU, taken from the serving process), as
    many rows a statement as the backend takes (`bulk_batch_size`: about 47 on SQLite, all on
    PostgreSQL). One statement per row would be one step of the database per row, and SQLite
    hands the GIL back and forth around every step: a thread switch per row with the event
    loop. Values the backend must adapt (times, UUIDs, JSON, decimals) go through the field's
    own preparation; text, numbers and flags go as they are."""
    db = connections[router.db_for_write(CallRecord)]
    fields = [field for field in CallRecord._meta.concrete_fields if not field.primary_key]
    plain = (models.CharField, models.TextField, models.IntegerField, models.BooleanField)
    names = [field.attname for field in fields]
    # Values the backend must adapt, by their place in a row.
    adapted = [
        (place, field.get_db_prep_save)
        for place, field in enumerate(fields)
        if not isinstance(field, plain)
    ]
    every_field = operator.itemgetter(*names)
    params = []
    for row in map(_storable, rows):
        try:
            values = list(every_field(row))
        except KeyError:  # a row without some field: its default
            values = [row[f.attname] if f.attname in row else f.get_default() for f in fields]
        for place, prepare in adapted:
            values[place] = prepare(values[place], db)
        params.append(values)
    size = max(1, db.ops.bulk_batch_size(fields, params))
    with db.cursor() as cursor:
        for start in range(0, len(params), size):
            chunk = params[start : start + size]
            cursor.execute(_insert_sql(db, fields, len(chunk)), [v for row in chunk for v in row])


def _insert_sql(db: Any, fields: list[Any], count: int) -> str:
    quote = db.ops.quote_name
    placeholders = "({})".format(", ".join(["%s"] * len(fields)))
    # Idempotent: a retry after a commit whose answer was lost skips what is already there.
    return "INSERT INTO {} ({}) VALUES {} ON CONFLICT ({}) DO NOTHING".format(
        quote(CallRecord._meta.db_table),
        ", ".join(quote(str(field.column)) for field in fields),
        ", ".join([placeholders] * count),
        quote("request_id"),
    )


# PostgreSQL's integer column: a count past it would fail the whole batch, forever.
_MAX_INT = 2**31 - 1
_COUNTS = ("tokens_in", "tokens_out", "latency_ms")
_TEXTS = ("prompt", "client", "task", "reason", "final_provider")


def _storable(row: dict[str, Any]) -> dict[str, Any]:
    """What every backend accepts: no NUL characters in text (PostgreSQL refuses them, and an
    upstream's error body may carry one) and no count past the column's range. Only the
    fields that can carry them are looked at: this runs for every record."""
    for name in _TEXTS:
        value = row.get(name)
        if isinstance(value, str) and "\x00" in value:
            row[name] = value.replace("\x00", "\ufffd")
    for name in _COUNTS:
        value = row.get(name)
        if isinstance(value, int) and value > _MAX_INT:
            row[name] = _MAX_INT
    for attempt in row.get("attempts") or ():
        detail = attempt.get("detail") if isinstance(attempt, dict) else None
        if isinstance(detail, str) and "\x00" in detail:
            attempt["detail"] = detail.replace("\x00", "\ufffd")
    return row
