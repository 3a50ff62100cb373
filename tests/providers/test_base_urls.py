"""Base URLs as providers publish them, and Azure OpenAI: each URL shape gives the URL the
adapter calls; the fake provider speaks Azure's paths, header and errors; an Azure provider and
an OpenAI-compatible one under a path prefix answer through the gateway; an Azure row needs its
api-version."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from devtools.fake_provider import FakeProvider
from gateway.adapters import ADAPTERS
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import CompletionRequest, HealthLevel
from gateway.adapters.pool import make_client
from gateway.engine.config import PolicyConfig, ProviderConfig, api_base
from gateway.sentinel.checks import check, wants_inference
from providers.models import Provider
from runtime.gateway import settings_for_clients
from tests.spec import sse_events

DEPLOYMENT = "my-deployment"
API_VERSION = "2024-10-21"
AZURE_KEY = "azure-key-0123456789abcdef"
AZURE_TEXT = "Hello from Azure."
AZURE_CHAT = f"/openai/deployments/{DEPLOYMENT}/chat/completions"
GEMINI_MODEL = "gemini-2.0-flash"
GEMINI_KEY = "gemini-key-0123456789abcdef"
GEMINI_TEXT = "Hello from Gemini."
GEMINI_PREFIX = "/v1beta/openai"
HELLO = [{"role": "user", "content": "Say hello."}]
QUESTION = CompletionRequest(prompt="Where is my order?")
MODELS = {"openai": "gpt-4o-mini", "azure": DEPLOYMENT, "ollama": "llama3.1:8b"}
MODELS["anthropic"] = "claude-3-5-haiku-latest"


def config(kind: str, base_url: str, **overrides: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": f"{kind}-test",
        "kind": kind,
        "base_url": base_url,
        "model": MODELS[kind],
        "priority": 10,
        "is_local": False,
        "timeout_s": 5.0,
        "context_window": 8192,
        "api_version": API_VERSION if kind == "azure" else "",
    }
    values.update(overrides)
    return ProviderConfig(**values)


def adapter_for(kind: str, base_url: str, **overrides: Any) -> ProviderAdapter:
    """An adapter over a client that never connects: for the URLs it builds."""
    return ADAPTERS[kind](config(kind, base_url, **overrides), httpx.AsyncClient())


def chat_url(adapter: ProviderAdapter, request: CompletionRequest = QUESTION) -> str:
    path, payload = adapter.stream_request(request)
    return str(adapter._build("POST", path, payload, 1.0).url)


def models_url(adapter: ProviderAdapter) -> str:
    return str(adapter._build("GET", adapter.models_path, None, 1.0).url)


# The rule, one URL shape at a time ---------------------------------------------------------


@pytest.mark.backend_free
class TestTheURLsAdaptersCall:
    @pytest.mark.parametrize(
        ("base_url", "chat"),
        [
            ("https://api.openai.com", "https://api.openai.com/v1/chat/completions"),
            ("https://api.openai.com/", "https://api.openai.com/v1/chat/completions"),
            ("https://api.openai.com/v1", "https://api.openai.com/v1/chat/completions"),
            ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/chat/completions"),
            (
                "https://generativelanguage.googleapis.com/v1beta/openai",
                "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
            ),
            (
                "https://generativelanguage.googleapis.com/v1beta/openai/",
                "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
            ),
            ("http://host/llm/openai/v1", "http://host/llm/openai/v1/chat/completions"),
            ("http://h/proxy/v1/", "http://h/proxy/v1/chat/completions"),
        ],
    )
    def test_an_openai_compatible_base_url_is_taken_as_openais_sdks_take_it(self, base_url, chat):
        adapter = adapter_for("openai", base_url)

        assert chat_url(adapter) == chat
        assert models_url(adapter) == chat.removesuffix("/chat/completions") + "/models"

    @pytest.mark.parametrize(
        "base_url",
        [
            "https://res.openai.azure.com",
            "https://res.openai.azure.com/",
            "https://res.openai.azure.com/openai/",
        ],
    )
    def test_azure_posts_to_the_deployment_with_the_api_version(self, base_url):
        adapter = adapter_for("azure", base_url)

        assert chat_url(adapter) == (
            f"https://res.openai.azure.com/openai/deployments/{DEPLOYMENT}/chat/completions"
            f"?api-version={API_VERSION}"
        )
        assert models_url(adapter) == (
            f"https://res.openai.azure.com/openai/models?api-version={API_VERSION}"
        )

    def test_azures_query_survives_the_request_template_cache(self):
        adapter = adapter_for("azure", "https://res.openai.azure.com")

        first, again = chat_url(adapter), chat_url(adapter)

        assert first == again
        assert httpx.URL(again).params["api-version"] == API_VERSION
        assert len(adapter._templates) == 1

    def test_azure_sends_the_api_key_header_and_no_bearer_nor_model(self):
        adapter = adapter_for("azure", "https://res.openai.azure.com", api_key=AZURE_KEY)
        path, payload = adapter.stream_request(QUESTION)

        built = adapter._build("POST", path, payload, 1.0)

        assert built.headers["api-key"] == AZURE_KEY
        assert "authorization" not in built.headers
        assert "model" not in payload
        assert payload["stream"] is True

    def test_a_model_an_alias_names_is_another_deployment(self):
        adapter = adapter_for("azure", "https://res.openai.azure.com")

        url = chat_url(adapter, CompletionRequest(prompt="hi", model="gpt-4o-eu"))

        assert "/openai/deployments/gpt-4o-eu/chat/completions?" in url

    def test_azures_v1_api_takes_openais_paths_with_the_deployment_as_the_model(self):
        adapter = adapter_for("azure", "https://res.openai.azure.com/openai/v1/", api_version="v1")
        _, payload = adapter.stream_request(QUESTION)

        assert chat_url(adapter) == (
            "https://res.openai.azure.com/openai/v1/chat/completions?api-version=v1"
        )
        assert models_url(adapter) == "https://res.openai.azure.com/openai/v1/models?api-version=v1"
        assert payload["model"] == DEPLOYMENT

    @pytest.mark.parametrize(
        ("kind", "base_url", "chat"),
        [
            ("ollama", "http://127.0.0.1:11434", "http://127.0.0.1:11434/api/chat"),
            ("ollama", "http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434/api/chat"),
            ("anthropic", "https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
            ("anthropic", "https://api.anthropic.com/v1", "https://api.anthropic.com/v1/messages"),
        ],
    )
    def test_ollama_and_anthropic_keep_their_origins(self, kind, base_url, chat):
        assert chat_url(adapter_for(kind, base_url)) == chat

    def test_the_rule_lives_in_one_place(self):
        assert api_base("openai", "https://x.example") == "https://x.example/v1"
        assert api_base("openai", "https://x.example/v1beta/openai/") == (
            "https://x.example/v1beta/openai"
        )
        assert api_base("azure", "https://x.example/openai") == "https://x.example"
        assert api_base("anthropic", "https://x.example/v1/") == "https://x.example"
        assert config("openai", "https://x.example").http_base_url == "https://x.example/v1"


# The adapters against the fake over loopback ----------------------------------------------


@pytest.fixture(scope="module")
def azure_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=[DEPLOYMENT], api_key=AZURE_KEY, text=AZURE_TEXT) as fake:
        yield fake


@pytest.fixture
def azure_fake(azure_server: FakeProvider) -> Iterator[FakeProvider]:
    azure_server.reset()
    yield azure_server
    azure_server.reset()


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=[GEMINI_MODEL], api_key=GEMINI_KEY, text=GEMINI_TEXT) as fake:
        yield fake


@pytest.fixture
def gemini_fake(gemini_server: FakeProvider) -> Iterator[FakeProvider]:
    gemini_server.reset()
    yield gemini_server
    gemini_server.reset()


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., ProviderAdapter]]:
    """Adapters built as the router builds them; their clients are closed at the end."""
    made: list[ProviderAdapter] = []

    def make(kind: str, base_url: str, **overrides: Any) -> ProviderAdapter:
        provider = config(kind, base_url, **overrides)
        adapter = ADAPTERS[kind](provider, make_client(provider, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


@pytest.mark.backend_free
class TestAgainstTheFake:
    async def test_azure_answers_whole_with_the_key_and_version_on_the_wire(
        self, azure_fake, make_adapter
    ):
        adapter = make_adapter("azure", azure_fake.url, api_key=AZURE_KEY)

        completion = await adapter.complete(QUESTION, timeout=5)

        assert completion.text == AZURE_TEXT
        seen = azure_fake.last_request(AZURE_CHAT)
        assert seen["headers"]["api-key"] == AZURE_KEY
        assert "authorization" not in seen["headers"]
        assert seen["query"] == f"api-version={API_VERSION}"
        assert "model" not in seen["body"]

    async def test_azure_streams_openais_events(self, azure_fake, make_adapter):
        adapter = make_adapter("azure", azure_fake.url, api_key=AZURE_KEY)

        stream = await adapter.stream(QUESTION, timeout=5, first_token_timeout=5)
        pieces = [stream.first, *[piece async for piece in stream.rest()]]

        assert "".join(p for p in pieces if isinstance(p, str)) == AZURE_TEXT
        assert stream.tokens_out > 0

    async def test_azures_health_check_reaches_the_model_level_on_its_model_list(
        self, azure_fake, make_adapter
    ):
        adapter = make_adapter("azure", azure_fake.url, api_key=AZURE_KEY)
        inference = wants_inference(adapter, PolicyConfig())  # a paid provider: not by default

        result = await check(adapter, timeout=5, inference=inference)

        assert (result.ok, result.level, inference) == (True, HealthLevel.MODEL, False)
        seen = azure_fake.last_request("/openai/models")
        assert (seen["headers"]["api-key"], seen["query"]) == (AZURE_KEY, "api-version=2024-10-21")
        assert azure_fake.calls == 0  # no chat call: the list alone

    async def test_azures_health_check_with_the_wrong_key_is_an_auth_failure(
        self, azure_fake, make_adapter
    ):
        adapter = make_adapter("azure", azure_fake.url, api_key="not-the-key")

        result = await check(adapter, timeout=5, inference=False)

        assert (result.ok, result.level) == (False, HealthLevel.REACHABLE)
        assert result.error_class is ErrorClass.AUTH
        assert "Access denied" in result.detail

    @pytest.mark.parametrize(
        ("overrides", "error_class", "words"),
        [
            ({"api_key": "not-the-key"}, ErrorClass.AUTH, "invalid subscription key"),
            (
                {"api_key": AZURE_KEY, "model": "gone"},
                ErrorClass.UPSTREAM_REJECTED,
                "DeploymentNotFound",
            ),
            (
                {"api_key": AZURE_KEY, "api_version": ""},
                ErrorClass.UPSTREAM_REJECTED,
                "Resource not found",
            ),
        ],
    )
    async def test_azures_refusals_are_classified_from_its_error_bodies(
        self, overrides, error_class, words, azure_fake, make_adapter
    ):
        adapter = make_adapter("azure", azure_fake.url, **overrides)

        with pytest.raises(ProviderError) as caught:
            await adapter.complete(QUESTION, timeout=5)

        assert caught.value.error_class is error_class
        assert words in caught.value.message

    async def test_the_fakes_azure_paths_want_the_api_key_header_not_a_bearer(self, azure_fake):
        async with httpx.AsyncClient(base_url=azure_fake.url) as client:
            bearer = await client.post(
                AZURE_CHAT + "?api-version=2024-10-21",
                json={"messages": HELLO},
                headers={"authorization": f"Bearer {AZURE_KEY}"},
            )
            keyed = await client.post(
                AZURE_CHAT + "?api-version=2024-10-21",
                json={"messages": HELLO},
                headers={"api-key": AZURE_KEY},
            )
            unversioned = await client.get("/openai/models", headers={"api-key": AZURE_KEY})

        assert bearer.status_code == 401 and bearer.json()["error"]["code"] == "401"
        assert keyed.status_code == 200 and keyed.json()["model"] == DEPLOYMENT
        assert unversioned.status_code == 404
        assert unversioned.json() == {"error": {"code": "404", "message": "Resource not found"}}

    async def test_azures_v1_api_answers_with_the_deployment_as_the_model(
        self, azure_fake, make_adapter
    ):
        adapter = make_adapter(
            "azure", azure_fake.url + "/openai/v1", api_key=AZURE_KEY, api_version="v1"
        )

        completion = await adapter.complete(QUESTION, timeout=5)
        health = await adapter.health_check(timeout=5)

        assert completion.text == AZURE_TEXT
        seen = azure_fake.last_request("/openai/v1/chat/completions")
        assert (seen["body"]["model"], seen["headers"]["api-key"]) == (DEPLOYMENT, AZURE_KEY)
        assert (health.ok, health.level) == (True, HealthLevel.MODEL)

    async def test_an_openai_compatible_provider_under_a_prefix_answers_and_is_checked(
        self, gemini_fake, make_adapter
    ):
        adapter = make_adapter(
            "openai", gemini_fake.url + GEMINI_PREFIX, model=GEMINI_MODEL, api_key=GEMINI_KEY
        )

        completion = await adapter.complete(QUESTION, timeout=5)
        health = await adapter.health_check(timeout=5)

        assert completion.text == GEMINI_TEXT
        assert gemini_fake.calls_to(GEMINI_PREFIX + "/chat/completions") == 1
        assert gemini_fake.calls_to("/v1/chat/completions") == 0
        seen = gemini_fake.last_request(GEMINI_PREFIX + "/models")
        assert seen["headers"]["authorization"] == f"Bearer {GEMINI_KEY}"
        assert (health.ok, health.level) == (True, HealthLevel.MODEL)


# Through the gateway ----------------------------------------------------------------------


async def _saved(provider: Provider, gateway) -> Provider:
    await sync_to_async(provider.full_clean)()
    await sync_to_async(provider.save)()
    await gateway.snapshots.refresh()
    return provider


@pytest.mark.django_db(transaction=True)
async def test_an_azure_provider_answers_through_the_gateway_with_its_key_and_version(
    api, gateway, primary, azure_fake, monkeypatch
):
    monkeypatch.setenv("FAILOVER_SECRET_AZURE_KEY", AZURE_KEY)
    provider = Provider(
        name="azure-eu",
        kind="azure",
        base_url=azure_fake.url,
        model=DEPLOYMENT,
        api_version=API_VERSION,
        api_key_env="FAILOVER_SECRET_AZURE_KEY",
        priority=5,  # ahead of the primary
        is_local=False,
        timeout_s=5,
    )
    await _saved(provider, gateway)

    whole = await api.post("/v1/chat/completions", json={"model": "auto", "messages": HELLO})
    streamed = await api.post(
        "/v1/chat/completions", json={"model": "auto", "messages": HELLO, "stream": True}
    )

    assert whole.status_code == 200, whole.text
    assert whole.json()["choices"][0]["message"]["content"] == AZURE_TEXT
    assert whole.headers["X-Failover-Provider"] == "azure-eu"
    events = [e for e in sse_events(streamed.text) if isinstance(e, dict)]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"])
    assert text == AZURE_TEXT
    seen = azure_fake.last_request(AZURE_CHAT)
    assert seen["headers"]["api-key"] == AZURE_KEY
    assert seen["query"] == f"api-version={API_VERSION}"
    assert (azure_fake.calls, primary.calls) == (2, 0)


@pytest.mark.django_db(transaction=True)
async def test_an_openai_compatible_provider_at_a_prefixed_base_url_answers_through_the_gateway(
    api, gateway, primary, gemini_fake, monkeypatch
):
    monkeypatch.setenv("FAILOVER_SECRET_GEMINI_KEY", GEMINI_KEY)
    provider = Provider(
        name="gemini",
        kind="openai",
        base_url=gemini_fake.url + GEMINI_PREFIX,
        model=GEMINI_MODEL,
        api_key_env="FAILOVER_SECRET_GEMINI_KEY",
        priority=5,
        is_local=False,
        timeout_s=5,
    )
    await _saved(provider, gateway)

    response = await api.post("/v1/chat/completions", json={"model": "auto", "messages": HELLO})

    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == GEMINI_TEXT
    seen = gemini_fake.last_request(GEMINI_PREFIX + "/chat/completions")
    assert seen["headers"]["authorization"] == f"Bearer {GEMINI_KEY}"
    assert seen["body"]["model"] == GEMINI_MODEL
    assert primary.calls == 0


@pytest.mark.django_db
def test_an_azure_row_without_its_api_version_is_refused():
    provider = Provider(
        name="azure-no-version",
        kind="azure",
        base_url="https://res.openai.azure.com",
        model=DEPLOYMENT,
    )

    with pytest.raises(ValidationError) as caught:
        provider.full_clean()

    assert "api_version" in caught.value.message_dict
