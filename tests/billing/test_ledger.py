"""The ledger writer: batched off the request path, nothing lost."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError, connection, connections
from django.utils import timezone

from alerts.models import AlertEvent
from billing.models import CallRecord
from providers.models import StaticAnswer
from runtime import ledger as ledger_module
from runtime.ledger import LedgerWriter
from tests.factories import make_static_answer

pytestmark = pytest.mark.django_db(transaction=True)


def _row(**overrides):
    row = {
        "request_id": str(uuid.uuid4()),
        "created_at": timezone.now(),
        "tier": "primary",
        "outcome": "ok",
        "status": 200,
        "final_provider": "ollama-local",
        "attempts": [{"provider": "ollama-local", "outcome": "ok", "latency_ms": 12}],
    }
    row.update(overrides)
    return row


async def _count() -> int:
    return await sync_to_async(CallRecord.objects.count)()


@pytest.fixture
async def writer():
    writer = LedgerWriter()
    yield writer
    await writer.aclose()
    await sync_to_async(connections.close_all)()


async def test_adding_never_writes_on_the_spot(writer):
    writer.add(_row())
    assert len(writer) == 1
    assert await _count() == 0
    assert await writer.flush() is True
    assert await _count() == 1 and len(writer) == 0


async def test_a_full_batch_is_written_without_waiting_for_the_timer(writer):
    writer.FLUSH_EVERY_S = 3600
    for _ in range(LedgerWriter.MAX_BATCH):
        writer.add(_row())
    for _ in range(100):  # the background task writes it; poll, don't sleep a fixed time
        if await _count() == LedgerWriter.MAX_BATCH:
            break
        await asyncio.sleep(0.05)
    assert await _count() == LedgerWriter.MAX_BATCH


async def test_the_timer_writes_a_partial_batch(writer):
    writer.FLUSH_EVERY_S = 0.05
    writer.add(_row())
    for _ in range(100):
        if await _count() == 1:
            break
        await asyncio.sleep(0.05)
    assert await _count() == 1


async def test_a_failed_write_keeps_the_rows_for_the_next_try(writer, monkeypatch):
    real_write = ledger_module.write_records
    failures = iter([OperationalError("database is locked")])

    def flaky(rows):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        real_write(rows)

    monkeypatch.setattr(ledger_module, "write_records", flaky)
    for _ in range(3):
        writer.add(_row())
    assert await writer.flush() is False
    assert len(writer) == 3 and await _count() == 0
    writer.add(_row())
    assert await writer.flush() is True
    assert await _count() == 4


async def test_hit_counts_are_added_once_per_batch(writer):
    answer = await sync_to_async(make_static_answer)()
    now = timezone.now()
    for minutes in (3, 2, 1):
        writer.add(_row(tier="static", outcome="fallback", static_answer_id=answer.pk,
                        created_at=now - timedelta(minutes=minutes)))  # fmt: skip
    await writer.flush()
    answer = await sync_to_async(StaticAnswer.objects.get)(pk=answer.pk)
    assert answer.hit_count == 3
    assert answer.last_hit_at == now - timedelta(minutes=1)


async def test_a_record_of_a_deleted_answer_is_kept_without_the_link(writer):
    answer = await sync_to_async(make_static_answer)()
    writer.add(_row(tier="static", outcome="fallback", static_answer_id=answer.pk))
    await sync_to_async(answer.delete)()
    assert await writer.flush() is True
    record = await sync_to_async(CallRecord.objects.get)()
    assert record.static_answer_id is None and record.tier == "static"


async def test_closing_writes_what_is_left(writer):
    writer.FLUSH_EVERY_S = 3600
    for _ in range(5):
        writer.add(_row())
    await writer.aclose()
    assert await _count() == 5


async def test_every_field_is_written_as_the_orm_would_write_it(writer):
    from decimal import Decimal

    answer = await sync_to_async(make_static_answer)()
    written = _row(
        client="web-frontend",
        priority="high",
        task="faq",
        attempts=[
            {"provider": "ollama-local", "outcome": "error", "error_class": "timeout"},
            {"provider": "openai-cloud", "outcome": "ok", "latency_ms": 840, "status": 200},
        ],
        final_provider="openai-cloud",
        tier="secondary",
        reason="primary_timeout",
        latency_ms=1234,
        tokens_in=17,
        tokens_out=230,
        cost=Decimal("0.00014055"),
        cache_hit=True,
        static_answer_id=answer.pk,
        prompt_hash="f" * 64,
        prompt="What is your refund policy?",
    )
    writer.add(dict(written))
    await writer.flush()
    record = await sync_to_async(CallRecord.objects.get)()
    for field, value in written.items():
        stored = getattr(record, field)
        assert (str(stored) if field == "request_id" else stored) == value, field


async def test_text_and_numbers_no_backend_accepts_are_made_storable(writer):
    writer.add(
        _row(
            prompt="nul\x00inside",
            tokens_out=2**64,
            attempts=[{"provider": "p", "outcome": "error", "detail": "bad\x00body"}],
        )
    )
    assert await writer.flush() is True
    record = await sync_to_async(CallRecord.objects.get)()
    assert record.prompt == "nul\ufffdinside"
    assert record.tokens_out == 2**31 - 1
    assert record.attempts[0]["detail"] == "bad\ufffdbody"


async def test_writing_the_same_record_twice_keeps_one(writer):
    row = _row()
    writer.add(dict(row))
    await writer.flush()
    writer.add(dict(row))  # a retry after a commit whose answer was lost
    assert await writer.flush() is True
    assert await _count() == 1


async def test_records_the_database_cannot_take_at_shutdown_wait_on_disk(
    writer, monkeypatch, settings, tmp_path
):
    settings.DATA_DIR = tmp_path

    def unreachable(rows):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(ledger_module, "write_records", unreachable)
    ids = []
    for _ in range(3):
        row = _row()
        ids.append(row["request_id"])
        writer.add(row)
    await writer.aclose()
    [spilled] = list((tmp_path / "ledger-spill").glob("*.jsonl"))
    assert len(spilled.read_text().splitlines()) == 3
    monkeypatch.undo()
    settings.DATA_DIR = tmp_path
    await LedgerWriter().replay_spilled()  # the next start
    stored = await sync_to_async(
        lambda: {str(r) for r in CallRecord.objects.values_list("request_id", flat=True)}
    )()
    assert stored == set(ids)
    assert not spilled.exists()


# Values the database itself refuses, as a bug upstream could hand it: a CHECK constraint on
# both backends, and on PostgreSQL a text past its column's length (SQLite doesn't enforce it).
REFUSED = [
    pytest.param({"latency_ms": -1}, "IntegrityError", id="negative-latency"),
    pytest.param({"tier": "x" * 17}, "DataError", id="over-long-tier", marks=pytest.mark.services),
]


@pytest.fixture
def handed(monkeypatch, settings, tmp_path):
    """Alerts raised, not delivered (delivery is the channels' business); files in tmp_path."""
    settings.DATA_DIR = tmp_path
    handed: list[tuple] = []
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kw: handed.append(args))
    return handed


def _rejected(tmp_path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted((tmp_path / "ledger-rejected").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


async def _alerts() -> list[AlertEvent]:
    for _ in range(100):  # raised by a background task: poll, don't sleep a fixed time
        events = await sync_to_async(list)(AlertEvent.objects.filter(kind="ledger_rejected"))
        if events:
            return events
        await asyncio.sleep(0.05)
    return []


@pytest.mark.parametrize(("bad", "error"), REFUSED)
async def test_a_refused_row_is_set_aside_and_the_other_49_are_written(
    writer, handed, tmp_path, caplog, bad, error
):
    rows = [_row() for _ in range(50)]
    rows[17].update(bad)
    bad_id = rows[17]["request_id"]
    for row in rows:
        writer.add(row)
    assert await writer.flush() is True
    assert await _count() == 49 and len(writer) == 0
    [kept] = _rejected(tmp_path)
    assert kept["request_id"] == bad_id and all(kept[k] == v for k, v in bad.items())
    [path] = (tmp_path / "ledger-rejected").glob("*.jsonl")
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert bad_id in line and error in line and str(path) in line
    [event] = await _alerts()
    assert event.severity == "critical" and event.data["path"] == str(path)
    assert event.data["count"] == 1 and error in event.data["error"]
    assert handed == [("deliver_alert", event.pk)]


async def test_a_later_batch_is_not_held_up_by_a_refused_row(writer, handed, tmp_path):
    writer.add(_row(latency_ms=-1))
    writer.add(_row())
    assert await writer.flush() is True
    for _ in range(3):
        writer.add(_row())
    assert await writer.flush() is True
    assert await _count() == 4 and len(writer) == 0
    assert len(_rejected(tmp_path)) == 1


async def test_an_unreachable_database_keeps_the_rows_and_sets_nothing_aside(
    writer, handed, monkeypatch, tmp_path
):
    def unreachable(rows):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(ledger_module, "write_records", unreachable)
    for _ in range(49):
        writer.add(_row())
    writer.add(_row(latency_ms=-1))
    assert await writer.flush() is False
    assert len(writer) == 50 and not (tmp_path / "ledger-rejected").exists()
    monkeypatch.undo()
    assert await writer.flush() is True  # the database is back: the same rule as ever
    assert await _count() == 49 and len(_rejected(tmp_path)) == 1


@pytest.mark.services
async def test_a_read_only_database_keeps_the_rows(writer, handed, tmp_path):
    """A standby after a database failover refuses every write: that's the database, not the
    rows, and they wait for a writable one."""
    import psycopg

    dsn = {k: v for k, v in connection.get_connection_params().items() if k != "context"}
    admin = await sync_to_async(psycopg.connect)(**dsn, autocommit=True)
    alter = f"ALTER DATABASE {connection.ops.quote_name(dsn['dbname'])}"
    try:
        await sync_to_async(admin.execute)(alter + " SET default_transaction_read_only = on")
        for _ in range(3):
            writer.add(_row())
        assert await writer.flush() is False
        assert len(writer) == 3 and not (tmp_path / "ledger-rejected").exists()
    finally:
        await sync_to_async(admin.execute)(alter + " RESET default_transaction_read_only")
        await sync_to_async(admin.close)()
    assert await writer.flush() is True and await _count() == 3


async def test_a_spilled_file_with_a_refused_row_is_written_and_the_row_set_aside(
    writer, handed, monkeypatch, tmp_path
):
    def unreachable(rows):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(ledger_module, "write_records", unreachable)
    rows = [_row() for _ in range(5)]
    rows[2]["latency_ms"] = -1
    for row in rows:
        writer.add(row)
    await writer.aclose()  # shutdown during the outage: to disk
    [spilled] = (tmp_path / "ledger-spill").glob("*.jsonl")
    with spilled.open("a") as out:
        out.write('{"request_id": "cut short by a crash\n')
    monkeypatch.undo()
    await LedgerWriter().replay_spilled()  # the next start
    assert await _count() == 4 and not spilled.exists()
    [rejected] = (tmp_path / "ledger-rejected").glob("*.jsonl")
    lines = rejected.read_text().splitlines()
    assert lines[0] == '{"request_id": "cut short by a crash'  # kept as it was
    assert json.loads(lines[1])["request_id"] == rows[2]["request_id"]
    [event] = await _alerts()
    assert event.data["count"] == 2 and event.data["path"] == str(rejected)


async def test_a_spilled_file_waits_while_the_database_is_unreachable(
    handed, monkeypatch, tmp_path
):
    spilled = tmp_path / "ledger-spill" / "1-1.jsonl"
    spilled.parent.mkdir()
    spilled.write_text(json.dumps(_row(), default=str) + "\n")

    def unreachable(rows):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(ledger_module, "write_records", unreachable)
    await LedgerWriter().replay_spilled()
    assert spilled.exists() and not (tmp_path / "ledger-rejected").exists()


async def test_an_alert_that_cannot_be_raised_never_breaks_the_ledger(
    writer, handed, monkeypatch, tmp_path
):
    def broken(*args):
        raise RuntimeError("alerts are down")

    monkeypatch.setattr(ledger_module, "ledger_rows_rejected", broken)
    writer.add(_row(latency_ms=-1))
    writer.add(_row())
    assert await writer.flush() is True
    await writer.aclose()
    assert await _count() == 1 and len(_rejected(tmp_path)) == 1
