"""The health sentinel: each adapter's levelled check against the fake provider over loopback,
the sentinel's runs (parallel, bounded, once per interval), the router's health gate and the
status page's health. The window's rule itself runs on both stores in test_state_stores."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from control_room.dashboard import control_status, health_of
from devtools.fake_provider import FakeProvider
from gateway.adapters import ADAPTERS
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass
from gateway.adapters.messages import HealthLevel
from gateway.adapters.pool import make_client
from gateway.engine.breaker import BreakerState, Mode, State
from gateway.engine.config import ProviderConfig
from gateway.engine.health import (
    DEGRADED,
    DOWN,
    HEALTHY,
    Health,
    HealthState,
    health_skip,
    next_health,
)
from gateway.sentinel.checks import sentinel_run, sentinel_tick
from gateway.state.contract import WindowSummary
from runtime.gateway import settings_for_clients
from tests.providers.conftest import ask, ledger_rows, update_policy

MODELS = {"ollama": "llama3.1:8b", "openai": "gpt-4o-mini", "anthropic": "claude-test"}
QUIET = WindowSummary(calls=0, failures=0, failure_rate_pct=0.0, p95_ms=None, calls_per_minute=0)
# A behaviour bound, not a benchmark: what "within the timeout" allows for a loaded machine.
SLACK_S = 0.6


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(models=list(MODELS.values())) as server:
        yield server


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., ProviderAdapter]]:
    made: list[ProviderAdapter] = []

    def make(kind: str, url: str, **overrides: Any) -> ProviderAdapter:
        values: dict[str, Any] = {
            "name": f"{kind}-test",
            "kind": kind,
            "base_url": url,
            "model": MODELS[kind],
            "priority": 10,
            "is_local": kind == "ollama",
            "timeout_s": 5.0,
            "context_window": 8192,
            **overrides,
        }
        config = ProviderConfig(**values)
        adapter = ADAPTERS[kind](config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


# Ollama: reachable, model pulled, one-token inference ------------------------------------


async def test_a_healthy_ollama_passes_all_three_levels_with_one_short_chat(fake, make_adapter):
    adapter = make_adapter("ollama", fake.url)

    health = await adapter.health_check(timeout=5, inference=True)

    assert health.ok and health.level == HealthLevel.INFERENCE
    assert health.detail == "" and health.error_class is None
    assert (fake.calls_to("/api/tags"), fake.calls_to("/api/chat")) == (1, 1)


async def test_an_ollama_without_the_model_is_bad_at_the_model_level(make_adapter):
    with FakeProvider(models=["mistral:7b"]) as fake:
        adapter = make_adapter("ollama", fake.url)

        health = await adapter.health_check(timeout=5, inference=True)

        assert not health.ok and health.level == HealthLevel.MODEL
        assert health.detail == "model llama3.1:8b is not pulled"
        assert fake.calls_to("/api/chat") == 0  # no inference on a model that isn't there


async def test_an_untagged_model_name_matches_ollamas_latest_tag(make_adapter):
    with FakeProvider(models=["llama3.1:latest"]) as fake:
        adapter = make_adapter("ollama", fake.url, model="llama3.1")
        assert (await adapter.health_check(timeout=5)).ok


async def test_failing_inference_is_bad_at_the_inference_level_while_tags_answer(
    fake, make_adapter
):
    fake.set_fault(mode="error", status=500, scope="chat")
    adapter = make_adapter("ollama", fake.url)

    health = await adapter.health_check(timeout=5, inference=True)

    assert not health.ok and health.level == HealthLevel.INFERENCE
    assert health.detail.startswith("inference failed: server_error")
    assert health.error_class == ErrorClass.SERVER_ERROR
    assert fake.calls_to("/api/tags") == 1


async def test_slow_inference_fails_as_a_timeout_within_the_checks_time(fake, make_adapter):
    fake.set_fault(mode="slow", delay_ms=3000)
    adapter = make_adapter("ollama", fake.url)

    started = time.monotonic()
    health = await adapter.health_check(timeout=0.5, inference=True)

    assert time.monotonic() - started < 0.5 + SLACK_S
    assert not health.ok and health.level == HealthLevel.INFERENCE
    assert health.detail.startswith("inference failed: timeout")


async def test_a_stopped_ollama_is_bad_at_the_reachable_level(fake, make_adapter):
    adapter = make_adapter("ollama", fake.url)
    fake.stop()

    health = await adapter.health_check(timeout=5, inference=True)

    assert not health.ok and health.level == HealthLevel.REACHABLE
    assert health.error_class == ErrorClass.REFUSED
    assert health.detail.startswith("/api/tags failed: refused")


# OpenAI-compatible and Anthropic: the model list, a paid probe only when asked -------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_cloud_check_reads_the_model_list_and_spends_no_token(kind, fake, make_adapter):
    adapter = make_adapter(kind, fake.url)

    health = await adapter.health_check(timeout=5)

    assert health.ok and health.level == HealthLevel.MODEL
    assert fake.calls_to("/v1/models") == 1 and fake.calls == 0


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_cloud_check_with_inference_asks_for_one_token(kind, fake, make_adapter):
    adapter = make_adapter(kind, fake.url)

    health = await adapter.health_check(timeout=5, inference=True)

    assert health.ok and health.level == HealthLevel.INFERENCE
    assert fake.calls == 1


async def test_an_openai_compatible_api_without_the_model_is_bad_at_the_model_level(
    make_adapter,
):
    with FakeProvider(models=["some-other-model"]) as fake:
        health = await make_adapter("openai", fake.url).health_check(timeout=5)
        assert not health.ok and health.level == HealthLevel.MODEL
        assert health.detail == "model gpt-4o-mini is not served"


async def test_a_rejected_key_is_bad_at_the_reachable_level(make_adapter):
    with FakeProvider(models=[MODELS["anthropic"]], api_key="sk-right") as fake:
        adapter = make_adapter("anthropic", fake.url, api_key="sk-wrong")
        health = await adapter.health_check(timeout=5)
        assert not health.ok and health.level == HealthLevel.REACHABLE
        assert health.error_class == ErrorClass.AUTH


# The rule, as pure code ---------------------------------------------------------------------


def test_the_rule_is_pure_and_dates_a_status_from_the_result_that_set_it():
    state = HealthState()
    for now in (0.0, 30.0, 60.0):
        state = next_health(state, False, now=now, window=5, degraded_after=3, down_after_s=300)
    assert (state.status, state.since, state.checked_at) == (Health.DEGRADED, 60.0, 60.0)


def test_health_skip_sends_high_priority_on_from_a_degraded_provider_and_everyone_from_down():
    assert health_skip("down", "normal") == health_skip("down", "high") == "health_down"
    assert health_skip("degraded", "high") == "health_degraded"
    assert health_skip("degraded", "normal") == ""
    assert health_skip("unknown", "high") == health_skip("healthy", "high") == ""


# The sentinel's runs ------------------------------------------------------------------------

with_db = pytest.mark.django_db(transaction=True)


@with_db
async def test_a_run_checks_every_enabled_provider_and_records_each_verdict(
    gateway, primary, secondary
):
    found = await sentinel_run(gateway)

    assert [(f.name, f.result.ok, f.state.status, f.changed) for f in found] == [
        ("ollama-local", True, Health.HEALTHY, True),
        ("openai-cloud", True, Health.HEALTHY, True),
    ]
    assert found[0].result.level == HealthLevel.INFERENCE  # self-hosted: a token is free
    assert found[1].result.level == HealthLevel.MODEL  # paid: no probe unless asked
    assert (primary.calls, secondary.calls) == (1, 0)
    verdicts = await gateway.store.health_read(["ollama-local", "openai-cloud"])
    assert verdicts["ollama-local"].window == (True,)
    assert await gateway.store.sentinel_last_run() == gateway.clock.wall()


@with_db
async def test_the_paid_probe_runs_only_when_the_policy_asks(gateway, primary, secondary):
    await sentinel_run(gateway)
    assert secondary.calls == 0
    await update_policy(gateway, sentinel_paid_probe=True)
    await sentinel_run(gateway)
    assert secondary.calls == 1


@with_db
async def test_providers_are_checked_in_parallel(gateway, primary, secondary):
    # A second and a half each: the primary's inference, the secondary's every endpoint.
    primary.set_fault(mode="slow", delay_ms=1500)
    secondary.set_fault(mode="slow", delay_ms=1500, scope="all")
    await gateway.snapshots.current()

    started = time.monotonic()
    found = await sentinel_run(gateway)

    assert time.monotonic() - started < 2.8  # one after the other would be over 3 s
    assert all(f.result.ok for f in found)


@with_db
async def test_a_hanging_provider_is_bad_within_the_check_timeout(gateway, primary, secondary):
    await update_policy(gateway, sentinel_check_timeout_s=1.0)
    primary.set_fault(mode="hang", scope="all")

    started = time.monotonic()
    found = await sentinel_run(gateway)

    assert time.monotonic() - started < 1.0 + SLACK_S
    bad, good = found
    assert not bad.result.ok and bad.result.error_class == ErrorClass.TIMEOUT
    assert bad.result.level == HealthLevel.REACHABLE
    assert good.result.ok


@with_db
async def test_two_ticks_at_once_make_one_run(gateway, primary, secondary):
    await gateway.snapshots.current()

    runs = await asyncio.gather(sentinel_tick(gateway), sentinel_tick(gateway))

    assert sorted(run is None for run in runs) == [False, True]
    assert primary.calls_to("/api/tags") == 1
    assert await sentinel_tick(gateway) is None  # the interval isn't over


@with_db
async def test_a_stopped_primary_goes_degraded_then_down_then_back_only_on_a_clean_window(
    gateway, clock, primary, secondary
):
    primary.stop()
    statuses = []
    for _ in range(3):
        found = await sentinel_run(gateway)
        statuses.append(found[0].state.status)
        clock.advance(30)
    assert statuses == [Health.HEALTHY, Health.HEALTHY, Health.DEGRADED]
    assert found[0].changed and found[0].result.detail.startswith("/api/tags failed: refused")
    clock.advance(300)
    assert (await sentinel_run(gateway))[0].state.status == Health.DOWN

    primary.start()  # the same port again
    for _ in range(4):
        clock.advance(30)
        assert (await sentinel_run(gateway))[0].state.status == Health.DOWN
    clock.advance(30)
    back = (await sentinel_run(gateway))[0]
    assert back.state.status == Health.HEALTHY and back.changed


def sentinel_lines(caplog) -> list[tuple[str, str]]:
    return [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "gateway.sentinel.checks"
    ]


@with_db
async def test_a_first_failed_check_is_logged_as_a_failure_though_the_status_stays_healthy(
    gateway, clock, primary, secondary, caplog
):
    caplog.set_level(logging.INFO, logger="gateway.sentinel.checks")
    primary.stop()
    await sentinel_run(gateway)
    # The two checks run at once: their lines come in the order the checks end.
    [(level, failed)] = [line for line in sentinel_lines(caplog) if "ollama-local" in line[1]]
    [first_good] = [line for line in sentinel_lines(caplog) if "openai-cloud" in line[1]]
    assert level == "WARNING"
    assert failed.startswith("sentinel: ollama-local check failed (/api/tags failed: refused")
    assert failed.endswith("); status healthy, 1 of 3 bad")
    assert first_good == ("INFO", "sentinel: openai-cloud is healthy (ok)")  # unknown → healthy

    caplog.clear()
    clock.advance(30)
    await sentinel_run(gateway)
    # The second failure again; the secondary's good check changed nothing: not a word.
    [(level, failed)] = sentinel_lines(caplog)
    assert level == "WARNING" and failed.endswith("; status healthy, 2 of 3 bad")


# The router's health gate -------------------------------------------------------------------


async def verdict(gateway, clock, name: str, status: Health) -> None:
    """Bring a provider's verdict to `status` the way the sentinel would: bad checks."""
    for _ in range(3):
        await gateway.store.health_record(
            name, False, now=clock.now, window=5, degraded_after=3, down_after_s=300
        )
    if status == Health.DOWN:
        clock.advance(300)
        await gateway.store.health_record(
            name, False, now=clock.now, window=5, degraded_after=3, down_after_s=300
        )
    assert (await gateway.store.health_read([name]))[name].status == status


@with_db
async def test_a_down_primary_is_skipped_without_a_call(api, gateway, clock, primary, secondary):
    await verdict(gateway, clock, "ollama-local", Health.DOWN)

    body = (await ask(api)).json()

    assert body["provider"] == "openai-cloud"
    assert primary.calls == 0
    [record] = await ledger_rows(gateway)
    assert record.reason == "primary_health_down"
    assert record.attempts[0] == {
        "provider": "ollama-local",
        "outcome": "skipped",
        "error_class": "health_down",
    }


@with_db
async def test_a_degraded_primary_keeps_normal_traffic_and_high_priority_moves_on(
    api, gateway, clock, primary, secondary
):
    await verdict(gateway, clock, "ollama-local", Health.DEGRADED)

    normal = (await ask(api)).json()
    high = (await ask(api, priority="high")).json()

    assert normal["provider"] == "ollama-local"
    assert high["provider"] == "openai-cloud"
    assert (primary.calls, secondary.calls) == (1, 1)
    records = await ledger_rows(gateway)
    assert records[-1].attempts[0]["error_class"] == "health_degraded"


@with_db
async def test_an_operator_forcing_the_breaker_closed_outranks_the_sentinel(
    api, gateway, clock, primary
):
    await verdict(gateway, clock, "ollama-local", Health.DOWN)
    await gateway.store.set_mode("ollama-local", Mode.FORCED_CLOSED)

    assert (await ask(api, priority="high")).json()["provider"] == "ollama-local"


# The status page ----------------------------------------------------------------------------


def test_the_status_page_shows_the_sentinels_verdict_when_it_has_one():
    assert health_of(BreakerState(health="down"), QUIET, True) == DOWN
    assert health_of(BreakerState(health="degraded"), QUIET, True) == DEGRADED
    assert health_of(BreakerState(health="healthy"), QUIET, True) == HEALTHY
    assert health_of(BreakerState(health="unknown"), QUIET, True) == HEALTHY
    # The worse of the two: an open breaker is down whatever the checks say.
    assert health_of(BreakerState(state=State.OPEN, health="healthy"), QUIET, True) == DOWN
    # Forced closed, the router serves it anyway: shown as degraded, not down.
    forced = BreakerState(mode=Mode.FORCED_CLOSED, health="down")
    assert health_of(forced, QUIET, True) == DEGRADED


@with_db
async def test_the_status_page_says_the_primary_is_down_by_its_health_checks(
    gateway, clock, primary, secondary
):
    await verdict(gateway, clock, "ollama-local", Health.DOWN)

    status = await sync_to_async(control_status)(gateway)

    assert [row.health for row in status.providers] == [DOWN, HEALTHY]
    assert (status.serving.tier, status.serving.provider) == ("secondary", "openai-cloud")
    assert status.serving.why == "ollama-local: down by its health checks"


@with_db
async def test_a_provider_whose_key_variable_is_unset_is_bad_without_a_call(
    gateway, secondary, monkeypatch
):
    from providers.models import Provider

    monkeypatch.delenv("FAILOVER_SECRET_SENTINEL_KEY", raising=False)
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        api_key_env="FAILOVER_SECRET_SENTINEL_KEY"
    )
    await gateway.snapshots.refresh()
    calls = secondary.calls

    found = {f.name: f for f in await sentinel_run(gateway)}

    cloud = found["openai-cloud"].result
    assert cloud.ok is False and "FAILOVER_SECRET_SENTINEL_KEY is not set" in cloud.detail
    assert secondary.calls == calls  # nothing was asked of it
