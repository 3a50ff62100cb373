"""Recovery without traffic: once a breaker's cooldown has ended and no request has come to
probe it, the sentinel probes it (a health check a probe), closing it or re-opening it."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from gateway.engine.breaker import EventKind, State
from gateway.sentinel.recovery import probe_idle_breakers
from providers.models import Incident
from tests.providers.conftest import ask, update_policy

PRIMARY = "ollama-local"


async def _opened(api, gateway, primary) -> None:
    await update_policy(gateway, cooldown_s=1, max_cooldown_s=600)
    primary.set_fault(mode="error")
    for _ in range(3):
        await ask(api, cache=False)
    state, _ = await gateway.store.read(PRIMARY)
    assert state.state == State.OPEN


async def _incident_ended() -> bool:
    for _ in range(50):
        incident = await sync_to_async(Incident.objects.filter(provider=PRIMARY).first)()
        if incident is not None and incident.ended_at is not None:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_with_no_traffic_the_sentinel_probes_and_closes_a_recovered_breaker(
    api, gateway, primary, secondary, clock
):
    from runtime.jobs import sentinel_job

    await _opened(api, gateway, primary)
    primary.set_fault(mode="ok")
    assert await probe_idle_breakers(gateway) == []  # still cooling down: nothing to probe
    clock.advance(1.1)  # the cooldown passes
    before = primary.calls
    await sentinel_job(gateway)  # its checks, then the probes no request came to send
    state, _ = await gateway.store.read(PRIMARY)
    assert state.state == State.CLOSED
    assert primary.calls > before
    assert await _incident_ended()  # the recovery is recorded (and alerted) with no request
    assert (await ask(api, cache=False)).json()["provider"] == PRIMARY


async def test_a_probe_that_fails_reopens_it_with_the_next_cooldown(api, gateway, primary, clock):
    await _opened(api, gateway, primary)
    first, _ = await gateway.store.read(PRIMARY)
    clock.advance(1.1)  # the cooldown passes
    events = await probe_idle_breakers(gateway)
    assert [e.kind for e in events] == [EventKind.HALF_OPENED, EventKind.OPENED]
    state, _ = await gateway.store.read(PRIMARY)
    assert state.state == State.OPEN and state.reopens == first.reopens + 1
    assert state.open_until - state.opened_at == pytest.approx(2.0)  # 1 s × 2


async def test_a_closed_or_forced_breaker_is_left_alone(api, gateway, primary):
    from gateway.engine.breaker import Mode

    assert await probe_idle_breakers(gateway) == []
    await gateway.store.set_mode(PRIMARY, Mode.DISABLED)
    assert await probe_idle_breakers(gateway) == []
    assert primary.calls == 0
