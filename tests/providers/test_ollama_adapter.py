"""Ollama's adapter as Ollama really behaves, against the fake provider over loopback: what
each call carries from the provider's row (think, num_ctx, keep_alive, the bearer key), the
model's thinking kept apart from its answer, and Ollama's own errors classified; then the same
through the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from devtools.fake_provider.app import OLLAMA_BUSY
from devtools.fake_provider.ollama_extra import THINKING_TEXT
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ERROR_TABLE, ErrorClass, ProviderError, classify_ollama
from gateway.adapters.messages import CompletionRequest, Reasoning, Tool
from gateway.adapters.ollama import OllamaAdapter, keep_alive_value
from gateway.adapters.pool import make_client
from gateway.engine.breaker import State
from gateway.routing.settling import windows
from providers.models import Provider
from runtime.gateway import settings_for_clients
from tests.providers.conftest import ledger_rows
from tests.providers.test_adapters import provider_config, shop_question
from tests.spec import ollama_reference, sse_events

LLAMA, QWEN = "llama3.1:8b", "qwen3:8b"  # a plain model, and one that thinks and calls tools
KEY = "ollama-test-key-123"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

backend_free = pytest.mark.backend_free


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=[LLAMA, QWEN], thinking_models=[QWEN], tool_models=[QWEN]) as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., ProviderAdapter]]:
    made: list[ProviderAdapter] = []

    def make(url: str, **overrides: Any) -> ProviderAdapter:
        config = provider_config("ollama", url, **overrides)
        adapter = OllamaAdapter(config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


def sent(fake: FakeProvider, path: str = "/api/chat") -> dict[str, Any]:
    last = fake.last_request(path)
    assert last is not None, f"nothing was sent to {path}"
    return last


async def failure(adapter: ProviderAdapter, request: CompletionRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await adapter.complete(request, timeout=5)
    return caught.value


@backend_free
class TestWhatEachCallCarries:
    async def test_think_is_off_by_default_and_a_thinking_model_then_answers_at_once(
        self, fake, make_adapter
    ):
        adapter = make_adapter(fake.url, model=QWEN)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert sent(fake)["body"]["think"] is False
        assert (completion.text, completion.reasoning) == (DEFAULT_TEXT, "")

    async def test_think_false_is_taken_by_a_model_that_cannot_think(self, fake, make_adapter):
        adapter = make_adapter(fake.url, model=LLAMA)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert sent(fake)["body"]["think"] is False and completion.text == DEFAULT_TEXT

    @pytest.mark.parametrize(
        ("think", "wire"), [("on", True), ("low", "low"), ("medium", "medium"), ("high", "high")]
    )
    async def test_think_on_or_a_level_is_sent_and_the_thinking_is_the_reasoning(
        self, fake, make_adapter, think, wire
    ):
        adapter = make_adapter(fake.url, model=QWEN, think=think)

        completion = await adapter.complete(shop_question(), timeout=5)

        assert sent(fake)["body"]["think"] == wire
        assert (completion.text, completion.reasoning) == (DEFAULT_TEXT, THINKING_TEXT)

    async def test_num_ctx_is_the_rows_context_window_beside_the_other_options(
        self, fake, make_adapter
    ):
        adapter = make_adapter(fake.url, context_window=32768)

        await adapter.complete(shop_question(max_tokens=3), timeout=5)

        assert sent(fake)["body"]["options"] == {"num_ctx": 32768, "num_predict": 3}

    async def test_keep_alive_is_sent_only_when_the_row_sets_it(self, fake, make_adapter):
        await make_adapter(fake.url).complete(shop_question(), timeout=5)
        assert "keep_alive" not in sent(fake)["body"]

        await make_adapter(fake.url, keep_alive="30m").complete(shop_question(), timeout=5)
        assert sent(fake)["body"]["keep_alive"] == "30m"

    @pytest.mark.parametrize(
        ("keep_alive", "wire"),
        [("-1", -1), ("0", 0), ("3600", 3600), ("1.5", 1.5), ("30m", "30m"), ("24h", "24h")],
    )
    def test_a_bare_number_of_seconds_goes_as_a_json_number(self, keep_alive, wire):
        # Ollama's duration parser refuses "-1" or "3600" as strings ("missing unit").
        assert keep_alive_value(keep_alive) == wire
        assert type(keep_alive_value(keep_alive)) is type(wire)

    async def test_the_bearer_key_goes_on_every_call_when_the_row_has_one(self, fake, make_adapter):
        fake.set_fault(api_key=KEY)  # the fake now refuses an Ollama call without it
        adapter = make_adapter(fake.url, api_key=KEY)

        health = await adapter.health_check(timeout=5, inference=True)
        stream = await adapter.stream(shop_question(), timeout=5, first_token_timeout=5)
        async for _ in stream.rest():
            pass

        assert health.ok, health.detail
        for path in ("/api/tags", "/api/chat"):
            assert sent(fake, path)["headers"]["authorization"] == f"Bearer {KEY}"

    async def test_no_authorization_header_without_a_key(self, fake, make_adapter):
        await make_adapter(fake.url).complete(shop_question(), timeout=5)

        assert "authorization" not in sent(fake)["headers"]

    async def test_the_health_probe_never_thinks_and_keeps_the_chats_window_and_stay(
        self, fake, make_adapter
    ):
        adapter = make_adapter(
            fake.url, model=QWEN, think="high", context_window=16384, keep_alive="-1"
        )

        health = await adapter.health_check(timeout=5, inference=True)
        probe = sent(fake)["body"]
        await adapter.complete(shop_question(), timeout=5)
        chat = sent(fake)["body"]

        assert health.ok, health.detail
        assert (probe["think"], chat["think"]) == (False, "high")
        # The same num_ctx as the chat: another would make Ollama reload the model.
        assert probe["options"] == {"num_ctx": 16384, "num_predict": 1}
        assert probe["options"]["num_ctx"] == chat["options"]["num_ctx"]
        assert probe["keep_alive"] == chat["keep_alive"] == -1


@backend_free
class TestAStreamedThinkingAnswer:
    async def test_its_thinking_comes_before_the_first_token_and_is_not_it(
        self, fake, make_adapter
    ):
        adapter = make_adapter(fake.url, model=QWEN, think="on")

        stream = await adapter.stream(shop_question(), timeout=5, first_token_timeout=5)
        rest = [piece async for piece in stream.rest()]

        assert sent(fake)["body"]["think"] is True
        assert isinstance(stream.first, str) and stream.first.strip()
        assert "".join(piece.text for piece in stream.before) == THINKING_TEXT
        assert not any(isinstance(piece, Reasoning) for piece in rest)
        completion = stream.completion(latency_ms=1.0)
        assert (completion.text, completion.reasoning) == (DEFAULT_TEXT, THINKING_TEXT)

    async def test_a_line_with_thinking_and_content_gives_the_thinking_and_queues_the_content(
        self, make_adapter
    ):
        adapter = make_adapter("http://127.0.0.1:1")
        stream = adapter.stream_over(shop_question(), httpx.Response(200), 5.0, 0.0)
        line = {"message": {"role": "assistant", "content": "Yes", "thinking": "Hm."}}

        assert stream.decoder.decode({**line, "done": False}, stream) == Reasoning("Hm.")
        assert list(stream.queued) == ["Yes"]

    async def test_an_error_line_mid_stream_breaks_it_in_ollamas_words(self, make_adapter):
        # The mid-stream error as Ollama's reference shows it: a line with only "error".
        reference = ollama_reference("api-errors.mdx")
        line = '{"error":"an error was encountered while running the model"}'
        assert line in reference
        adapter = make_adapter("http://127.0.0.1:1")
        stream = adapter.stream_over(shop_question(), httpx.Response(200), 5.0, 0.0)

        with pytest.raises(ProviderError) as caught:
            stream.decoder.decode(
                {"error": "an error was encountered while running the model"}, stream
            )

        assert caught.value.error_class == ErrorClass.SERVER_ERROR
        assert "an error was encountered while running the model" in caught.value.message


@backend_free
class TestOllamasErrors:
    async def test_a_busy_server_is_a_cool_down_not_a_breaker_failure(self, fake, make_adapter):
        fake.set_fault(mode="busy")
        adapter = make_adapter(fake.url)

        error = await failure(adapter, shop_question())
        with pytest.raises(ProviderError) as streamed:
            await adapter.stream(shop_question(), timeout=5, first_token_timeout=5)

        for caught in (error, streamed.value):
            assert (caught.error_class, caught.status) == (ErrorClass.RATE_LIMITED, 503)
            assert caught.rule.cool_down and not caught.rule.breaker_failure

    async def test_tools_to_a_model_without_them_are_unsupported(self, fake, make_adapter):
        adapter = make_adapter(fake.url, model=LLAMA)
        weather = Tool(name="get_weather", parameters=WEATHER["function"]["parameters"])
        tool = CompletionRequest(prompt="Weather?", tools=(weather,))

        error = await failure(adapter, tool)

        assert (error.error_class, error.status) == (ErrorClass.UNSUPPORTED, 400)
        assert "does not support tools" in error.message

    async def test_thinking_asked_of_a_model_that_cannot_is_unsupported(self, fake, make_adapter):
        error = await failure(make_adapter(fake.url, model=LLAMA, think="on"), shop_question())

        assert error.error_class == ErrorClass.UNSUPPORTED
        assert f'"{LLAMA}" does not support thinking' in error.message

    async def test_another_400_stays_the_clients_error(self, fake, make_adapter):
        fake.set_fault(mode="bad_request")

        error = await failure(make_adapter(fake.url), shop_question())

        assert error.error_class == ErrorClass.CLIENT_ERROR

    @pytest.mark.parametrize(
        ("status", "message", "expected"),
        [
            (503, OLLAMA_BUSY, ErrorClass.RATE_LIMITED),
            (503, "the model failed to load", ErrorClass.SERVER_ERROR),
            (400, "registry.ollama.ai/library/llama3:latest does not support tools", "u"),
            (400, '"llama3" does not support thinking', "u"),
            (400, '"llama3" does not support chat', "u"),
            (400, '"llama3" does not support generate', "u"),
            (400, "llama3 does not support insert", "u"),
            (400, "invalid think value: 3", ErrorClass.CLIENT_ERROR),
            (400, "input length exceeds the context length", ErrorClass.CONTEXT_TOO_LONG),
            (404, 'model "x" not found, try pulling it first', ErrorClass.UPSTREAM_REJECTED),
        ],
    )
    def test_ollamas_words_classify_its_statuses(self, status, message, expected):
        expected = ErrorClass.UNSUPPORTED if expected == "u" else expected
        assert classify_ollama(status, message) == expected

    def test_unsupported_skips_the_provider_for_the_request_without_a_breaker_failure(self):
        rule = ERROR_TABLE[ErrorClass.UNSUPPORTED]
        assert rule.try_next and not rule.breaker_failure
        assert not (rule.cool_down or rule.opens_breaker or rule.larger_context_only)


# Through the gateway ------------------------------------------------------------------------


async def _row(gateway: Any, **values: Any) -> None:
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(**values)
    await gateway.snapshots.refresh()


async def _chat(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post("/v1/chat/completions", json={"model": "auto", "messages": ASK, **body})


@pytest.mark.django_db(transaction=True)
class TestThroughTheGateway:
    async def test_the_rows_think_window_and_stay_reach_ollama(self, api, gateway, primary):
        primary.set_fault(thinking_models=[LLAMA])
        await _row(gateway, context_window=16384, keep_alive="45m")

        response = await _chat(api)

        body = response.json()
        assert body["model"] == "ollama-local"
        assert "reasoning_content" not in body["choices"][0]["message"]
        wire = sent(primary)["body"]
        assert (wire["think"], wire["options"]["num_ctx"], wire["keep_alive"]) == (
            False,
            16384,
            "45m",
        )

    async def test_with_think_on_a_streams_reasoning_comes_before_its_content(
        self, api, gateway, primary
    ):
        primary.set_fault(thinking_models=[LLAMA])
        await _row(gateway, think="on")

        response = await _chat(api, stream=True)

        assert response.status_code == 200, response.text
        deltas = [
            chunk["choices"][0]["delta"]
            for chunk in sse_events(response.text)
            if chunk != "[DONE]" and chunk["choices"]
        ]
        kinds = [
            key for delta in deltas for key in ("reasoning_content", "content") if delta.get(key)
        ]
        first_content = kinds.index("content")
        assert kinds[:first_content] == ["reasoning_content"] * first_content and first_content
        assert "reasoning_content" not in kinds[first_content:]
        thinking = "".join(delta.get("reasoning_content") or "" for delta in deltas)
        assert thinking == THINKING_TEXT
        assert "".join(delta.get("content") or "" for delta in deltas) == primary.config.text

    async def test_the_rows_key_is_sent_as_a_bearer_token(self, api, gateway, primary, monkeypatch):
        monkeypatch.setenv("FAILOVER_SECRET_TEST_OLLAMA_KEY", KEY)
        primary.set_fault(api_key=KEY)
        await _row(gateway, api_key_env="FAILOVER_SECRET_TEST_OLLAMA_KEY")

        response = await _chat(api)

        assert response.json()["model"] == "ollama-local"
        assert sent(primary)["headers"]["authorization"] == f"Bearer {KEY}"

    async def test_a_busy_ollama_cools_down_and_the_next_provider_answers(
        self, api, gateway, primary, clock
    ):
        primary.set_fault(mode="busy")

        response = await _chat(api)

        assert response.json()["model"] == "openai-cloud"
        [record] = await ledger_rows(gateway)
        assert record.attempts[0]["error_class"] == "rate_limited"
        assert record.attempts[0]["status"] == 503
        await _no_breaker_failure(gateway, clock, cooled_down=True)

    async def test_tools_to_a_model_without_them_skip_ollama_as_unsupported(
        self, api, gateway, primary, clock
    ):
        primary.set_fault(tool_models=[])

        response = await _chat(api, tools=[WEATHER])

        assert response.json()["model"] == "openai-cloud"
        [record] = await ledger_rows(gateway)
        attempt = record.attempts[0]
        assert (attempt["provider"], attempt["error_class"]) == ("ollama-local", "unsupported")
        assert "does not support tools" in attempt["detail"]
        await _no_breaker_failure(gateway, clock, cooled_down=False)


async def _no_breaker_failure(gateway: Any, clock: Any, *, cooled_down: bool) -> None:
    state, _ = await gateway.store.read("ollama-local")
    policy = (await gateway.snapshots.current()).policy
    summary = await gateway.store.summary("ollama-local", windows(policy), clock.wall())
    assert (state.consecutive_failures, state.reopens, summary.failures) == (0, 0, 0)
    if cooled_down:  # open for the cool-down, as for a 429: skipped, not failed
        assert (state.state, state.reason) == (State.OPEN, "rate_limited")
    else:
        assert state.state == State.CLOSED
