"""Both adapters against the real fake provider over loopback: answers, what went on the wire,
every fault classified by the error table, health checks, the contract and the pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from gateway.adapters import ADAPTERS
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import Completion, CompletionRequest, HealthResult
from gateway.adapters.ollama import OllamaAdapter
from gateway.adapters.openai import OpenAICompatibleAdapter
from gateway.adapters.pool import AdapterPool, make_client
from gateway.engine.config import ProviderConfig
from runtime.gateway import settings_for_clients
from tests.providers.wire import Wire

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = pytest.mark.backend_free

KINDS = ["ollama", "openai"]
MODELS = {"ollama": "llama3.1:8b", "openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}
SYSTEM = "You answer shop questions."
PROMPT = "Where is my order?"
PROMPT_WORDS = len(SYSTEM.split()) + len(PROMPT.split())
ANSWER_WORDS = len(DEFAULT_TEXT.split())
# A behaviour bound, not a benchmark: a call given 0.3 s must not hang on for seconds.
TIMEOUT_BOUND_S = 2.0

kinds = pytest.mark.parametrize("kind", KINDS)


def provider_config(kind: str, url: str, **overrides: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": f"{kind}-test",
        "kind": kind,
        "base_url": url,
        "model": MODELS[kind],
        "priority": 10,
        "is_local": kind == "ollama",
        "timeout_s": 5.0,
        "context_window": 8192,
    }
    values.update(overrides)
    return ProviderConfig(**values)


def shop_question(**fields: Any) -> CompletionRequest:
    return CompletionRequest(prompt=PROMPT, system_prompt=SYSTEM, **fields)


@pytest.fixture(autouse=True, params=["native", "aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest, settings: Any) -> str:
    """Every adapter test runs on both connection pools the platform can use."""
    settings.PROVIDER_HTTP_CLIENT = request.param
    return request.param


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def fake_server_2() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture
def stopped_fake() -> FakeProvider:
    """A provider that was up and went away: its port no longer listens."""
    fake = FakeProvider().start()
    fake.stop()
    return fake


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., ProviderAdapter]]:
    """Adapters built as the router builds them; their clients are closed at the end."""
    made: list[ProviderAdapter] = []

    def make(kind: str, url: str, **overrides: Any) -> ProviderAdapter:
        config = provider_config(kind, url, **overrides)
        adapter = ADAPTERS[kind](config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


async def failure(adapter: ProviderAdapter, *, timeout: float = 5.0) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await adapter.complete(shop_question(), timeout=timeout)
    return caught.value


class TestAGoodAnswer:
    @kinds
    async def test_it_returns_the_text_provider_tokens_and_latency(self, kind, fake, make_adapter):
        adapter = make_adapter(kind, fake.url)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert isinstance(completion, Completion)
        assert completion.text == DEFAULT_TEXT
        assert completion.provider == f"{kind}-test"
        assert completion.tokens_in == PROMPT_WORDS  # the system prompt was counted too
        assert completion.tokens_out == ANSWER_WORDS
        assert completion.latency_ms > 0

    @kinds
    async def test_a_gzip_encoded_answer_reads_as_the_plain_one(self, kind, fake, make_adapter):
        fake.set_fault(content_encoding="gzip")
        adapter = make_adapter(kind, fake.url)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert completion.text == DEFAULT_TEXT

    @kinds
    async def test_only_the_native_pool_skips_httpxs_client_for_both_kinds_of_call(
        self, kind, transport, fake, make_adapter
    ):
        adapter = make_adapter(kind, fake.url)
        through_httpx: list[httpx.Request] = []

        async def seen(request: httpx.Request) -> None:
            through_httpx.append(request)

        adapter.client.event_hooks = {"request": [seen], "response": []}

        await adapter.complete(shop_question(), timeout=5)
        stream = await adapter.stream(shop_question(), timeout=5, first_token_timeout=5)
        await stream.aclose()

        # httpx's own pool takes both through httpx's client, aiohttp's the stream; the
        # native pool neither.
        assert len(through_httpx) == {"httpx": 2, "aiohttp": 1, "native": 0}[transport]
        assert fake.calls == 2

    @kinds
    async def test_it_asks_for_the_configured_model_with_the_system_prompt_first(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(models=["shop-model:7b"])  # any other model would be a 404
        adapter = make_adapter(kind, fake.url, model="shop-model:7b")
        wire = Wire(adapter)

        await adapter.complete(shop_question(), timeout=5)

        assert wire.sent[0]["model"] == "shop-model:7b"
        assert wire.sent[0]["messages"] == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        assert fake.calls == 1

    @kinds
    async def test_it_sends_no_system_message_without_a_system_prompt(
        self, kind, fake, make_adapter
    ):
        adapter = make_adapter(kind, fake.url)
        wire = Wire(adapter)

        completion = await adapter.complete(CompletionRequest(prompt=PROMPT), timeout=5)

        assert wire.sent[0]["messages"] == [{"role": "user", "content": PROMPT}]
        assert completion.tokens_in == len(PROMPT.split())

    @kinds
    async def test_the_answer_is_cut_to_max_tokens(self, kind, fake, make_adapter):
        adapter = make_adapter(kind, fake.url)

        completion = await adapter.complete(shop_question(max_tokens=3), timeout=5)

        assert completion.text == " ".join(DEFAULT_TEXT.split()[:3])
        assert completion.tokens_out == 3

    async def test_ollama_gets_num_predict_and_temperature_as_options_unstreamed(
        self, fake, make_adapter
    ):
        adapter = make_adapter("ollama", fake.url)
        wire = Wire(adapter)

        await adapter.complete(shop_question(max_tokens=3, temperature=0.2), timeout=5)

        assert wire.sent[0]["options"] == {"num_ctx": 8192, "num_predict": 3, "temperature": 0.2}
        assert wire.sent[0]["stream"] is False

    async def test_ollama_gets_only_its_context_window_when_no_options_are_given(
        self, fake, make_adapter
    ):
        adapter = make_adapter("ollama", fake.url)
        wire = Wire(adapter)

        await adapter.complete(shop_question(), timeout=5)

        assert wire.sent[0]["options"] == {"num_ctx": 8192}

    async def test_openai_gets_max_tokens_and_temperature(self, fake, make_adapter):
        adapter = make_adapter("openai", fake.url)
        wire = Wire(adapter)

        await adapter.complete(shop_question(max_tokens=3, temperature=0.2), timeout=5)

        assert wire.sent[0]["max_tokens"] == 3
        assert wire.sent[0]["temperature"] == 0.2
        assert not wire.sent[0].get("stream")

    async def test_openai_gets_neither_max_tokens_nor_temperature_when_none_are_given(
        self, fake, make_adapter
    ):
        adapter = make_adapter("openai", fake.url)
        wire = Wire(adapter)

        await adapter.complete(shop_question(), timeout=5)

        assert "max_tokens" not in wire.sent[0]
        assert "temperature" not in wire.sent[0]

    @kinds
    async def test_a_slow_answer_within_the_timeout_is_still_an_answer(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="slow", delay_ms=150)
        adapter = make_adapter(kind, fake.url)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert completion.text == DEFAULT_TEXT
        assert completion.latency_ms >= 150


class TestOpenAIKeysAndUrls:
    async def test_it_sends_the_configured_key_as_a_bearer_token(self, fake, make_adapter):
        fake.set_fault(api_key="sk-shop-123")
        adapter = make_adapter("openai", fake.url, api_key="sk-shop-123")
        wire = Wire(adapter)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert completion.text == DEFAULT_TEXT
        assert wire.headers[0]["authorization"] == "Bearer sk-shop-123"

    async def test_a_wrong_key_is_an_auth_error_with_status_401(self, fake, make_adapter):
        fake.set_fault(api_key="sk-shop-123")
        adapter = make_adapter("openai", fake.url, api_key="sk-wrong")

        error = await failure(adapter)

        assert error.error_class is ErrorClass.AUTH
        assert error.status == 401

    async def test_no_key_where_one_is_required_is_an_auth_error(self, fake, make_adapter):
        fake.set_fault(api_key="sk-shop-123")
        adapter = make_adapter("openai", fake.url)
        wire = Wire(adapter)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.AUTH
        assert "authorization" not in wire.headers[0]

    @pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/"])
    async def test_a_base_url_ending_in_v1_or_a_slash_works_too(self, suffix, fake, make_adapter):
        adapter = make_adapter("openai", fake.url + suffix)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert completion.text == DEFAULT_TEXT
        assert fake.calls_to("/v1/chat/completions") == 1


class TestFaults:
    @kinds
    async def test_a_port_nobody_listens_on_is_refused(self, kind, closed_port, make_adapter):
        adapter = make_adapter(kind, f"http://127.0.0.1:{closed_port}")

        error = await failure(adapter)

        assert error.error_class is ErrorClass.REFUSED
        assert error.status is None

    @kinds
    async def test_a_stopped_provider_is_refused(self, kind, stopped_fake, make_adapter):
        adapter = make_adapter(kind, stopped_fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.REFUSED

    @kinds
    async def test_a_hanging_provider_times_out_within_the_timeout(self, kind, fake, make_adapter):
        fake.set_fault(mode="hang")
        adapter = make_adapter(kind, fake.url)

        started = time.monotonic()
        error = await failure(adapter, timeout=0.3)
        elapsed = time.monotonic() - started

        assert error.error_class is ErrorClass.TIMEOUT
        assert elapsed < TIMEOUT_BOUND_S

    @kinds
    async def test_a_provider_slower_than_the_timeout_times_out(self, kind, fake, make_adapter):
        fake.set_fault(mode="slow", delay_ms=3000)
        adapter = make_adapter(kind, fake.url)

        started = time.monotonic()
        error = await failure(adapter, timeout=0.3)

        assert error.error_class is ErrorClass.TIMEOUT
        assert time.monotonic() - started < TIMEOUT_BOUND_S

    @kinds
    @pytest.mark.parametrize("status", [500, 503])
    async def test_a_5xx_is_a_server_error_with_its_status_and_is_not_retried(
        self, kind, status, fake, make_adapter
    ):
        fake.set_fault(mode="error", status=status)
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.SERVER_ERROR
        assert error.status == status
        assert fake.calls == 1

    @kinds
    async def test_a_broken_body_is_malformed(self, kind, fake, make_adapter):
        fake.set_fault(mode="malformed")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.MALFORMED

    @kinds
    async def test_a_body_whose_encoding_does_not_decode_is_malformed(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(content_encoding="bad_gzip")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.MALFORMED
        assert "DecodingError" in error.message

    @kinds
    async def test_a_429_with_retry_after_seconds_is_rate_limited_for_that_long(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="rate_limit", retry_after="7")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.RATE_LIMITED
        assert error.status == 429
        assert error.retry_after_s == 7

    @kinds
    async def test_a_429_with_retry_after_as_a_date_is_rate_limited_until_then(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="rate_limit", retry_after=formatdate(time.time() + 30, usegmt=True))
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.RATE_LIMITED
        assert error.retry_after_s == pytest.approx(30, abs=2)

    @kinds
    async def test_a_429_without_retry_after_leaves_the_wait_to_the_router(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="rate_limit")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.RATE_LIMITED
        assert error.retry_after_s is None

    @kinds
    async def test_unauthorized_is_an_auth_error(self, kind, fake, make_adapter):
        fake.set_fault(mode="unauthorized")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.AUTH
        assert error.status == 401

    @kinds
    async def test_a_prompt_over_the_context_is_context_too_long(self, kind, fake, make_adapter):
        fake.set_fault(mode="context_too_long")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.CONTEXT_TOO_LONG
        assert error.status == 400
        assert error.rule.larger_context_only

    @kinds
    async def test_a_bad_request_is_the_clients_error_and_is_not_retried(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="bad_request")
        adapter = make_adapter(kind, fake.url)

        error = await failure(adapter)

        assert error.error_class is ErrorClass.CLIENT_ERROR
        assert error.status == 400
        assert not error.rule.try_next
        assert fake.calls == 1

    @kinds
    async def test_an_unknown_model_is_rejected_upstream_naming_the_model(
        self, kind, fake, make_adapter
    ):
        adapter = make_adapter(kind, fake.url, model="no-such-model")

        error = await failure(adapter)

        assert error.error_class is ErrorClass.UPSTREAM_REJECTED
        assert error.status == 404
        assert "no-such-model" in error.message


class TestHealthCheck:
    @kinds
    async def test_it_is_ok_when_the_model_is_served(self, kind, fake, make_adapter):
        adapter = make_adapter(kind, fake.url)

        health = await adapter.health_check(timeout=5)

        assert isinstance(health, HealthResult)
        assert health.ok
        assert health.latency_ms > 0
        assert health.error_class is None
        assert fake.calls == 0  # a health check is not a chat call

    @kinds
    async def test_it_is_not_ok_naming_the_model_when_other_models_are_served(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(models=["mistral:7b", "qwen2:7b"])
        adapter = make_adapter(kind, fake.url)

        health = await adapter.health_check(timeout=5)

        assert not health.ok
        assert MODELS[kind] in health.detail
        assert health.error_class is None

    @kinds
    async def test_it_is_not_ok_and_refused_when_the_provider_is_stopped(
        self, kind, stopped_fake, make_adapter
    ):
        adapter = make_adapter(kind, stopped_fake.url)

        health = await adapter.health_check(timeout=5)

        assert not health.ok
        assert health.error_class is ErrorClass.REFUSED

    @kinds
    async def test_a_chat_only_fault_leaves_it_ok(self, kind, fake, make_adapter):
        fake.set_fault(mode="error", status=503)
        adapter = make_adapter(kind, fake.url)

        assert (await adapter.health_check(timeout=5)).ok

    @kinds
    async def test_a_fault_on_every_endpoint_makes_it_not_ok_with_the_class(
        self, kind, fake, make_adapter
    ):
        fake.set_fault(mode="error", status=503, scope="all")
        adapter = make_adapter(kind, fake.url)

        health = await adapter.health_check(timeout=5)

        assert not health.ok
        assert health.error_class is ErrorClass.SERVER_ERROR


class TestContract:
    def test_the_registry_maps_each_kind_to_its_adapter(self):
        assert set(ADAPTERS) == {"ollama", "openai", "anthropic", "azure"}
        assert ADAPTERS["ollama"] is OllamaAdapter
        assert ADAPTERS["openai"] is OpenAICompatibleAdapter

    def test_an_adapter_without_complete_cannot_be_made(self):
        class NoComplete(ProviderAdapter):
            kind = "no-complete"

            async def health_check(self, *, timeout: float) -> HealthResult:
                return HealthResult(True, 0.0)

        config = provider_config("ollama", "http://127.0.0.1:1")
        with pytest.raises(TypeError, match="complete"):
            NoComplete(config, None)  # type: ignore[abstract,arg-type]

    def test_an_adapter_without_health_check_cannot_be_made(self):
        class NoHealthCheck(ProviderAdapter):
            kind = "no-health-check"

            async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
                return Completion("", self.name, 0, 0, 0.0)

        config = provider_config("ollama", "http://127.0.0.1:1")
        with pytest.raises(TypeError, match="health_check"):
            NoHealthCheck(config, None)  # type: ignore[abstract,arg-type]


@pytest.fixture
async def pool() -> AsyncIterator[AdapterPool]:
    pool = AdapterPool(settings_for_clients())
    yield pool
    await pool.aclose()


class TestAdapterPool:
    @kinds
    async def test_it_gives_the_same_adapter_and_client_for_the_same_config(self, kind, fake, pool):
        first = pool.get(provider_config(kind, fake.url))
        second = pool.get(provider_config(kind, fake.url))

        assert first is not None
        assert second is first
        assert second.client is first.client
        assert isinstance(first, ADAPTERS[kind])

    async def test_a_change_that_keeps_the_endpoint_keeps_the_warm_client(self, fake, pool):
        old = pool.get(provider_config("ollama", fake.url, timeout_s=5.0, priority=10))
        new = pool.get(provider_config("ollama", fake.url, timeout_s=9.0, priority=11))

        assert old is not None and new is not None
        assert new is not old and new.config.timeout_s == 9.0
        assert new.client is old.client and not old.client.is_closed
        assert pool.adapters() == [new]

    async def test_a_new_endpoint_gets_a_new_client_and_calls_in_flight_on_the_old_finish(
        self, fake, fake_server_2, pool
    ):
        fake.set_fault(mode="slow", delay_ms=300)
        old = pool.get(provider_config("ollama", fake.url, timeout_s=5.0))
        in_flight = asyncio.ensure_future(old.complete(shop_question(), timeout=5))
        await asyncio.sleep(0.05)
        new = pool.get(provider_config("ollama", fake_server_2.url, timeout_s=5.0))

        assert new is not None and new.client is not old.client
        assert (await in_flight).text  # the replaced client wasn't closed under it
        assert not old.client.is_closed
        await pool.aclose()
        assert old.client.is_closed and new.client.is_closed

    async def test_a_changed_key_gets_a_new_client(self, fake, pool):
        old = pool.get(provider_config("openai", fake.url, api_key="sk-old"))
        new = pool.get(provider_config("openai", fake.url, api_key="sk-new"))

        assert old is not None and new is not None
        assert new.client is not old.client

    async def test_each_provider_gets_its_own_adapter(self, fake, pool):
        local = pool.get(provider_config("ollama", fake.url, name="local"))
        cloud = pool.get(provider_config("openai", fake.url, name="cloud"))

        assert local is not None and cloud is not None
        assert local.client is not cloud.client
        assert {adapter.name for adapter in pool.adapters()} == {"local", "cloud"}

    async def test_it_has_no_adapter_for_a_kind_it_does_not_speak(self, fake, pool):
        config = replace(provider_config("openai", fake.url), kind="bedrock")

        assert pool.get(config) is None

    @kinds
    async def test_sequential_calls_reuse_one_connection(self, kind, fake, pool):
        adapter = pool.get(provider_config(kind, fake.url))
        assert adapter is not None
        wire = Wire(adapter)

        for _ in range(20):
            await adapter.complete(shop_question(), timeout=5)

        assert fake.calls == 20
        assert len(wire.local_ports) == 20
        assert len(set(wire.local_ports)) <= 2
