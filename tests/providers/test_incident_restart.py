"""Incidents across a restart: one left open by a process that stopped is resumed while the
shared state still has its breaker out, and closed when nothing follows it any more, so the
next outage is an incident (and an alert) of its own."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from gateway.engine.breaker import BreakerEvent, BreakerState, EventKind, State
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import ResilientStore
from providers.models import Incident
from runtime.incidents import incidents_and_alerts, incidents_reconcile
from tests.serving import lifespan_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def handed(monkeypatch) -> list[tuple]:
    """The jobs handed over (the failover check after the flap window), not run."""
    handed: list[tuple] = []
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kw: handed.append(args))
    return handed


async def left_open(provider: str = "ollama-local") -> Incident:
    """An incident a process that has stopped opened an hour ago."""
    return await sync_to_async(Incident.objects.create)(
        provider=provider, started_at=timezone.now() - timedelta(hours=1), reason="timeout"
    )


async def reloaded(incident: Incident) -> Incident:
    return await sync_to_async(Incident.objects.get)(pk=incident.pk)


async def open_breaker(store, name: str = "ollama-local") -> None:
    now = time.time()
    opened = BreakerState(state=State.OPEN, opened_at=now, open_until=now + 60, reason="timeout")
    assert await store.transition(name, 0, opened)


async def test_one_whose_breaker_is_gone_is_closed_and_the_next_outage_is_a_new_incident(
    handed,
):
    stale = await left_open()

    resumed, closed = await incidents_reconcile(MemoryStore())  # a fresh process's memory

    assert (resumed, [i.pk for i in closed]) == ([], [stale.pk])
    stale = await reloaded(stale)
    assert stale.ended_at is not None and stale.closed_reason == "restart"
    assert handed == []  # no recovery: nobody saw it recover
    event = BreakerEvent(EventKind.OPENED, "ollama-local", time.time(), "refused")
    await sync_to_async(incidents_and_alerts)([event])
    new = await sync_to_async(Incident.objects.get)(ended_at__isnull=True)
    assert new.pk != stale.pk and new.reason == "refused"
    assert (await reloaded(stale)).reopened == 0
    assert handed == [("failover_check", new.pk)]


async def test_one_whose_breaker_the_shared_state_still_has_open_goes_on():
    store = MemoryStore()
    await open_breaker(store)
    ongoing = await left_open()
    other = await left_open("openai-cloud")  # its breaker is closed: closed

    resumed, closed = await incidents_reconcile(store)

    assert [i.pk for i in resumed] == [ongoing.pk] and [i.pk for i in closed] == [other.pk]
    ongoing = await reloaded(ongoing)
    assert ongoing.ended_at is None and ongoing.closed_reason == ""
    # Its breaker's closing ends it as ever.
    event = BreakerEvent(EventKind.CLOSED, "ollama-local", time.time())
    await sync_to_async(incidents_and_alerts)([event])
    ongoing = await reloaded(ongoing)
    assert ongoing.ended_at is not None and ongoing.closed_reason == ""


async def test_with_the_shared_state_unreachable_it_is_left_as_it_is(closed_port):
    store = ResilientStore(RedisStore(f"redis://127.0.0.1:{closed_port}/0"))
    stale = await left_open()

    resumed, closed = await incidents_reconcile(store)

    assert (resumed, closed) == ([], [])  # the local stand-in can't say the outage is over
    assert (await reloaded(stale)).ended_at is None
    await store.aclose()


@asynccontextmanager
async def serving_process_started(monkeypatch) -> AsyncIterator[list[dict]]:
    """The ASGI application's lifespan, started (what it sent back) and then shut down."""
    async with lifespan_run(monkeypatch, state={}) as sent:
        yield sent


async def test_a_serving_process_settles_them_as_it_starts_before_any_request(gateway, monkeypatch):
    stale = await left_open()
    async with serving_process_started(monkeypatch) as sent:
        assert sent == [{"type": "lifespan.startup.complete"}]
        stale = await reloaded(stale)
        assert stale.ended_at is not None and stale.closed_reason == "restart"


async def test_a_failure_to_settle_them_is_logged_and_the_process_starts_all_the_same(
    gateway, monkeypatch, caplog
):
    async def broken(store):
        raise RuntimeError("database gone")

    monkeypatch.setattr("failover_site.asgi.incidents_reconcile", broken)
    async with serving_process_started(monkeypatch) as sent:
        assert sent == [{"type": "lifespan.startup.complete"}]
    assert "could not be settled at start-up" in caplog.text
