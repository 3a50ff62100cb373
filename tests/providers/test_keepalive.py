"""The warm keepalive: a one-token ping to an idle secondary while the primary is healthy, once
per interval across processes, counted as a health result and never as traffic."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from asgiref.sync import sync_to_async

from gateway.engine.breaker import BreakerState, State
from gateway.engine.health import Health
from gateway.sentinel.keepalive import keepalive_tick
from gateway.state.contract import Windows
from providers.models import Provider
from tests.providers.conftest import ask, update_policy

pytestmark = pytest.mark.django_db(transaction=True)

WINDOWS = Windows(bucket_s=1, failure_window_s=60, p95_window_s=120)


@pytest.fixture
async def enabled(gateway) -> None:
    await update_policy(gateway, keepalive_enabled=True)


async def secondary_counters(gateway) -> tuple[BreakerState, int]:
    """The secondary's breaker (without the sentinel's verdict, which a ping does move) and
    the calls its window counted."""
    state, _ = await gateway.store.read("openai-cloud")
    summary = await gateway.store.summary("openai-cloud", WINDOWS, gateway.clock.wall())
    return replace(state, health="unknown"), summary.calls


async def test_it_does_nothing_unless_the_policy_enables_it(gateway, secondary):
    assert await keepalive_tick(gateway) == "skipped: disabled"
    assert secondary.calls == 0


async def test_it_pings_an_idle_secondary_with_one_token_while_the_primary_is_healthy(
    gateway, enabled, primary, secondary
):
    assert await keepalive_tick(gateway) == "pinged"

    assert (primary.calls, secondary.calls) == (0, 1)
    verdict = (await gateway.store.health_read(["openai-cloud"]))["openai-cloud"]
    assert verdict.window == (True,) and verdict.status == Health.HEALTHY


async def test_a_ping_never_touches_the_secondarys_breaker_counters(gateway, enabled, secondary):
    before = await secondary_counters(gateway)
    assert await keepalive_tick(gateway) == "pinged"
    assert await secondary_counters(gateway) == before


async def test_a_failed_ping_is_a_bad_health_result_and_still_not_a_breaker_failure(
    gateway, enabled, secondary
):
    secondary.set_fault(mode="error", status=503)

    assert await keepalive_tick(gateway) == "pinged: failed (server_error)"

    state, calls = await secondary_counters(gateway)
    assert (state.consecutive_failures, state.state, calls) == (0, State.CLOSED, 0)
    verdict = (await gateway.store.health_read(["openai-cloud"]))["openai-cloud"]
    assert verdict.window == (False,) and verdict.detail.startswith("keepalive ping failed")


async def test_it_skips_while_the_primary_is_degraded(gateway, enabled, clock, secondary):
    for _ in range(3):
        await gateway.store.health_record(
            "ollama-local", False, now=clock.now, window=5, degraded_after=3, down_after_s=300
        )
    assert await keepalive_tick(gateway) == "skipped: primary unhealthy"
    assert secondary.calls == 0


async def test_it_skips_while_the_primarys_breaker_is_open(gateway, enabled, clock, secondary):
    opened = BreakerState(
        state=State.OPEN, version=1, opened_at=clock.now, open_until=clock.now + 60
    )
    assert await gateway.store.transition("ollama-local", 0, opened)
    assert await keepalive_tick(gateway) == "skipped: primary unhealthy"
    assert secondary.calls == 0


async def test_it_skips_while_the_secondary_already_carries_traffic(
    api, gateway, enabled, primary, secondary
):
    primary.set_fault(mode="error")
    assert (await ask(api)).json()["provider"] == "openai-cloud"
    primary.set_fault(mode="ok")  # one failure: its breaker is still closed

    assert await keepalive_tick(gateway) == "skipped: secondary carries traffic"
    assert secondary.calls == 1  # the request, no ping


async def test_it_skips_without_a_secondary(gateway, enabled, secondary):
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(enabled=False)
    gateway.snapshots.mark_stale()
    await gateway.snapshots.refresh()

    assert await keepalive_tick(gateway) == "skipped: no secondary"


async def test_concurrent_ticks_ping_once_per_interval(gateway, enabled, secondary):
    done = await asyncio.gather(*(keepalive_tick(gateway) for _ in range(5)))

    assert sorted(done) == ["pinged"] + ["skipped: pinged recently"] * 4
    assert secondary.calls == 1
