"""A model that is loading, told from one that is wedged: Ollama's /api/ps (the models held in
memory) in the adapter's health check and at a call's first-byte bound, the verdict `loading`
in both stores, and the fake provider that plays the load."""

from __future__ import annotations

import time

import httpx
import pytest

from devtools.fake_provider import FakeProvider
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.ollama import OllamaAdapter, load_seconds
from gateway.adapters.pool import make_client
from gateway.engine.breaker import BreakerState
from gateway.engine.health import LOADING, Health, health_skip, provider_health
from runtime.gateway import settings_for_clients
from tests.providers.test_adapters import provider_config
from tests.providers.test_state_stores import NAME, T0, WINDOW, store  # noqa: F401

GRACE_S = 120.0


def adapter_for(url: str) -> OllamaAdapter:
    config = provider_config("ollama", url, model="llama3.1:8b")
    return OllamaAdapter(config, make_client(config, settings_for_clients()))


class TestTheFakeProviderLoads:
    pytestmark = pytest.mark.backend_free

    def test_the_first_call_loads_the_model_and_the_others_wait_for_the_same_load(self):
        with FakeProvider(models=["llama3.1:8b"]) as fake:
            fake.set_fault(mode="loading", load_ms=600)
            assert httpx.get(f"{fake.url}/api/ps").json()["models"] == []
            body = {"model": "llama3.1:8b", "messages": [{"role": "user", "content": "Hi"}]}
            started = time.monotonic()
            first = httpx.post(f"{fake.url}/api/chat", json={**body, "stream": False}, timeout=5)
            waited = time.monotonic() - started
            assert 0.55 < waited < 1.5
            assert load_seconds(first.json()["load_duration"]) == pytest.approx(waited, abs=0.2)
            assert [m["name"] for m in httpx.get(f"{fake.url}/api/ps").json()["models"]] == [
                "llama3.1:8b"
            ]
            started = time.monotonic()
            again = httpx.post(f"{fake.url}/api/chat", json={**body, "stream": False}, timeout=5)
            assert time.monotonic() - started < 0.3  # loaded: no second load
            assert load_seconds(again.json()["load_duration"]) < 0.01


class TestTheAdapterTellsLoadingFromWedged:
    pytestmark = pytest.mark.backend_free

    async def test_a_loading_model_is_a_good_check_that_says_so(self):
        with FakeProvider(models=["llama3.1:8b"]) as fake:
            fake.set_fault(mode="loading", load_ms=3000)
            adapter = adapter_for(fake.url)
            try:
                assert await adapter.model_loading(timeout=1.0) is True
                result = await adapter.health_check(timeout=0.6, inference=True)
            finally:
                await adapter.client.aclose()
        assert result.ok and result.loading
        assert result.detail == "model llama3.1:8b is loading (not yet in /api/ps)"

    async def test_a_wedged_model_fails_its_check(self):
        with FakeProvider(models=["llama3.1:8b"]) as fake:
            fake.set_fault(mode="hang")  # listed as loaded, and no answer
            adapter = adapter_for(fake.url)
            try:
                assert await adapter.model_loading(timeout=1.0) is False
                result = await adapter.health_check(timeout=0.6, inference=True)
            finally:
                await adapter.client.aclose()
        assert not result.ok and not result.loading

    async def test_a_server_that_does_not_answer_is_not_loading(self):
        with FakeProvider(models=["llama3.1:8b"]) as fake:
            fake.set_fault(mode="hang", scope="all")
            adapter = adapter_for(fake.url)
            try:
                assert await adapter.model_loading(timeout=0.3) is False
            finally:
                await adapter.client.aclose()

    async def test_an_answers_load_is_kept_apart_from_its_latency(self):
        with FakeProvider(models=["llama3.1:8b"]) as fake:
            fake.set_fault(mode="loading", load_ms=400)
            adapter = adapter_for(fake.url)
            try:
                completion = await adapter.complete(CompletionRequest(prompt="Hi"), timeout=5)
            finally:
                await adapter.client.aclose()
        assert 0.35 < completion.load_s < 1.0

    def test_load_duration_is_read_only_when_it_is_a_positive_number(self):
        assert load_seconds(2_500_000_000) == 2.5
        assert load_seconds(None) == load_seconds("5") == load_seconds(True) == 0.0
        assert load_seconds(-1) == 0.0


async def test_a_loading_result_makes_the_verdict_loading_within_its_grace(store):  # noqa: F811
    loading = await store.health_record(NAME, True, now=T0, loading_grace_s=GRACE_S, **WINDOW)
    assert (loading.status, loading.since, loading.loading_since) == (Health.LOADING, T0, T0)
    later = await store.health_record(NAME, True, now=T0 + 60, loading_grace_s=GRACE_S, **WINDOW)
    assert (later.status, later.since, later.loading_since) == (Health.LOADING, T0, T0)
    # Loaded: a plain good check, and the verdict is healthy again (no alert: never bad).
    loaded = await store.health_record(NAME, True, now=T0 + 90, **WINDOW)
    assert (loaded.status, loaded.loading_since) == (Health.HEALTHY, 0.0)


async def test_a_load_past_its_grace_counts_as_a_failed_check(store):  # noqa: F811
    for i in range(5):  # 0, 40, ... 160 s: the last two past the grace
        state = await store.health_record(
            NAME, True, now=T0 + 40 * i, loading_grace_s=GRACE_S, **WINDOW
        )
    assert state.window == (True, True, True, False, False)
    assert state.status == Health.HEALTHY  # two bad of five: not yet degraded
    state = await store.health_record(NAME, True, now=T0 + 200, loading_grace_s=GRACE_S, **WINDOW)
    assert state.status == Health.DEGRADED  # a load that never ends is a failure


@pytest.mark.backend_free
def test_a_loading_provider_is_tried_and_shown_as_loading():
    assert health_skip(Health.LOADING, "high") == ""
    shown = provider_health(BreakerState(health=Health.LOADING), recent_failures=0)
    assert shown == LOADING == "loading"
