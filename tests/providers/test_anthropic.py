"""The Anthropic adapter against the fake provider's Messages API, over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from devtools.fake_provider import FakeProvider
from gateway.adapters.anthropic import API_VERSION, DEFAULT_MAX_TOKENS, AnthropicAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.pool import make_client
from gateway.engine.config import ProviderConfig
from runtime.gateway import settings_for_clients
from tests.providers.wire import Wire

MODEL = "claude-3-5-haiku-latest"
KEY = "sk-ant-test-key"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=[MODEL], api_key=KEY, text="Hello from Claude.") as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture(params=["native", "aiohttp", "httpx"])
async def adapter(request, settings, fake) -> AsyncIterator[AnthropicAdapter]:
    settings.PROVIDER_HTTP_CLIENT = request.param
    config = ProviderConfig(
        name="anthropic-cloud",
        kind="anthropic",
        base_url=fake.url,
        model=MODEL,
        priority=30,
        is_local=False,
        timeout_s=5.0,
        context_window=200_000,
        api_key=KEY,
    )
    adapter = AnthropicAdapter(config, make_client(config, settings_for_clients()))
    adapter.wire = Wire(adapter)  # type: ignore[attr-defined]
    yield adapter
    await adapter.client.aclose()


async def _fails(adapter: AnthropicAdapter, **fields: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await adapter.complete(CompletionRequest(prompt="Say hello.", **fields), timeout=2)
    return caught.value


async def test_it_answers_from_the_text_blocks_with_anthropics_token_counts(adapter):
    completion = await adapter.complete(CompletionRequest(prompt="Say hello."), timeout=5)
    assert completion.text == "Hello from Claude."
    assert (completion.provider, completion.tokens_in, completion.tokens_out) == (
        "anthropic-cloud",
        2,
        3,
    )


async def test_the_system_prompt_is_a_top_level_field_and_max_tokens_is_always_sent(adapter):
    await adapter.complete(
        CompletionRequest(prompt="Say hello.", system_prompt="Be brief.", temperature=1.7),
        timeout=5,
    )
    body = adapter.wire.sent[-1]
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": "Say hello."}]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["temperature"] == 1.0  # clamped to Anthropic's range
    headers = adapter.wire.headers[-1]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == API_VERSION
    assert "authorization" not in headers


async def test_max_tokens_reaches_the_provider(adapter):
    completion = await adapter.complete(
        CompletionRequest(prompt="Say hello.", max_tokens=2), timeout=5
    )
    assert completion.text == "Hello from" and completion.tokens_out == 2


def _with_key(adapter: AnthropicAdapter, key: str) -> AnthropicAdapter:
    return AnthropicAdapter(replace(adapter.config, api_key=key), adapter.client)


async def test_a_wrong_key_is_an_auth_error(adapter):
    error = await _fails(_with_key(adapter, "sk-ant-wrong"))
    assert (error.error_class, error.status) == (ErrorClass.AUTH, 401)


@pytest.mark.parametrize(
    ("fault", "error_class", "status"),
    [
        ({"mode": "overloaded"}, ErrorClass.RATE_LIMITED, 529),
        ({"mode": "rate_limit", "retry_after": "12"}, ErrorClass.RATE_LIMITED, 429),
        ({"mode": "context_too_long"}, ErrorClass.CONTEXT_TOO_LONG, 400),
        ({"mode": "bad_request"}, ErrorClass.CLIENT_ERROR, 400),
        ({"mode": "error", "status": 500}, ErrorClass.SERVER_ERROR, 500),
        ({"mode": "malformed"}, ErrorClass.MALFORMED, None),
    ],
)
async def test_each_fault_maps_onto_the_error_table(adapter, fake, fault, error_class, status):
    fake.set_fault(**fault)
    error = await _fails(adapter)
    assert (error.error_class, error.status) == (error_class, status)
    if fault.get("retry_after"):
        assert error.retry_after_s == 12


async def test_the_health_check_proves_the_key(adapter, fake):
    assert (await adapter.health_check(timeout=2)).ok
    health = await _with_key(adapter, "sk-ant-wrong").health_check(timeout=2)
    assert not health.ok and health.error_class == ErrorClass.AUTH


@pytest.mark.django_db(transaction=True)
async def test_an_anthropic_provider_takes_over_in_the_cascade(
    api, gateway, primary, fake, monkeypatch
):
    from asgiref.sync import sync_to_async

    from providers.models import Provider

    monkeypatch.setenv("FAILOVER_SECRET_TEST_ANTHROPIC_KEY", KEY)
    await sync_to_async(Provider.objects.create)(
        name="anthropic-cloud",
        kind="anthropic",
        base_url=fake.url,
        model=MODEL,
        api_key_env="FAILOVER_SECRET_TEST_ANTHROPIC_KEY",
        priority=15,
        is_local=False,
    )
    primary.stop()
    response = await api.post("/api/v1/complete", json={"prompt": "Say hello."})
    body = response.json()
    assert (body["provider"], body["tier"], body["text"]) == (
        "anthropic-cloud",
        "secondary",
        "Hello from Claude.",
    )
