"""The OpenAI-compatible endpoints, whole answers: the official SDK against the real server, the
error shapes, an Anthropic provider behind them, and the fake provider's Anthropic dialect checked
against Anthropic's own SDK (the adapter's tests run against that fake). Streaming semantics are
in test_openai_streaming.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from asgiref.sync import sync_to_async

import providers
from devtools.fake_provider import FakeProvider
from providers.models import Provider
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

URL = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Say hello."}]
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
CLAUDE_MODEL = "claude-haiku-4-5"
CLAUDE_KEY = "sk-ant-test-key"
CLAUDE_TEXT = "Hello from Claude."


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def static_answer(alternative: str) -> str:
    """One of the 50 shipped answers, as the file ships it."""
    path = Path(providers.__file__).parent / "data" / "static_answers.json"
    [answer] = [
        entry["answer"]
        for entry in json.loads(path.read_text(encoding="utf-8"))
        if alternative in entry["alternatives"]
    ]
    return answer


# Whole answers through the SDK ------------------------------------------------------------


async def test_the_sdk_gets_the_primarys_answer_named_after_it_with_usage_and_tier(
    live_url, primary, secondary
):
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    completion = raw.parse()
    [choice] = completion.choices
    assert (choice.message.role, choice.message.content) == ("assistant", PRIMARY_TEXT)
    assert choice.finish_reason == "stop"
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert completion.model == "ollama-local"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2, 5, 7)
    assert raw.headers["X-Failover-Tier"] == "primary"
    assert raw.headers["X-Failover-Provider"] == "ollama-local"
    failover = completion.model_extra["failover"]
    assert (failover["tier"], failover["provider"], failover["is_fallback"]) == (
        "primary",
        "ollama-local",
        False,
    )
    assert failover["request_id"] == raw.headers["X-Request-Id"]
    assert (primary.calls, secondary.calls) == (1, 0)


async def test_with_the_primary_down_the_sdk_gets_the_secondarys_answer(
    live_url, gateway, primary, secondary
):
    primary.stop()
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    completion = raw.parse()
    assert completion.choices[0].message.content == SECONDARY_TEXT
    assert completion.model == "openai-cloud"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 5)
    assert raw.headers["X-Failover-Tier"] == "secondary"
    assert completion.model_extra["failover"]["tier"] == "secondary"
    [record] = await ledger_rows(gateway)
    assert (record.final_provider, record.outcome, record.reason) == (
        "openai-cloud",
        "ok",
        "primary_refused",
    )


async def test_with_both_down_a_static_answer_arrives_as_a_normal_chat_completion(
    live_url, gateway, primary, secondary
):
    primary.stop()
    secondary.stop()
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "What are your opening hours?"}]
        )
    completion = raw.parse()
    [choice] = completion.choices
    assert choice.message.content == static_answer("opening hours")
    assert choice.finish_reason == "stop"
    assert completion.model == "static"
    failover = completion.model_extra["failover"]
    assert (failover["tier"], failover["provider"], failover["is_fallback"]) == (
        "static",
        None,
        True,
    )
    assert failover["degradation_notice"]
    assert raw.headers["X-Failover-Tier"] == "static"
    [record] = await ledger_rows(gateway)
    assert (record.tier, record.outcome) == ("static", "fallback")
    assert record.static_answer_id is not None


@pytest.mark.parametrize(
    ("model", "provider"), [("auto", "ollama-local"), ("openai-cloud", "openai-cloud")]
)
async def test_a_multi_turn_conversation_reaches_the_provider_whole(
    live_url, primary, secondary, model, provider
):
    # The fake counts the prompt's tokens as the words of every message it receives: the
    # question alone is 4, the whole conversation 18.
    messages = [
        {"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": "My name is Ana."},
        {"role": "assistant", "content": "Nice to meet you, Ana."},
        {"role": "user", "content": "What is my name?"},
    ]
    async with sdk(live_url) as client:
        completion = await client.chat.completions.create(model=model, messages=messages)
        alone = await client.chat.completions.create(model=model, messages=messages[-1:])
    assert completion.model == provider
    assert completion.usage.prompt_tokens == 5 + 4 + 5 + 4
    assert alone.usage.prompt_tokens == 4


@pytest.mark.parametrize(
    ("model", "limit"),
    [
        ("auto", {"max_tokens": 2}),
        ("auto", {"max_completion_tokens": 2}),
        ("openai-cloud", {"max_tokens": 2}),
    ],
    ids=["ollama-max_tokens", "ollama-max_completion_tokens", "openai-max_tokens"],
)
async def test_an_answer_cut_at_max_tokens_finishes_with_length(
    live_url, primary, secondary, model, limit
):
    async with sdk(live_url) as client:
        completion = await client.chat.completions.create(model=model, messages=HELLO, **limit)
    [choice] = completion.choices
    assert choice.message.content == "Hello from"  # the limit reached the provider
    assert completion.usage.completion_tokens == 2
    assert choice.finish_reason == "length"  # as OpenAI says it, and as the stream does


async def test_text_parts_and_a_developer_message_are_read_as_plain_text(
    live_url, primary, secondary
):
    messages = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi"}],
        },
    ]
    async with sdk(live_url) as client:
        completion = await client.chat.completions.create(model="auto", messages=messages)
    assert completion.choices[0].message.content == PRIMARY_TEXT
    assert completion.usage.prompt_tokens == 4


# Choosing a provider by name --------------------------------------------------------------


async def test_a_providers_name_as_the_model_goes_to_it_first(
    live_url, gateway, primary, secondary
):
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="openai-cloud", messages=HELLO
        )
    completion = raw.parse()
    assert completion.choices[0].message.content == SECONDARY_TEXT
    assert completion.model == "openai-cloud"
    assert raw.headers["X-Failover-Tier"] == "secondary"
    assert (primary.calls, secondary.calls) == (0, 1)
    [record] = await ledger_rows(gateway)
    assert record.reason == "requested_by_name"


async def test_a_provider_asked_for_by_name_that_fails_hands_over_to_the_cascade(
    live_url, primary, secondary
):
    secondary.set_fault(mode="error", status=503)
    async with sdk(live_url) as client:
        completion = await client.chat.completions.create(model="openai-cloud", messages=HELLO)
    assert completion.model == "ollama-local"
    assert (primary.calls, secondary.calls) == (1, 1)


async def test_an_unknown_model_is_a_404_in_openais_error_shape(live_url, primary, secondary):
    async with sdk(live_url) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(model="gpt-5-turbo", messages=HELLO)
    error = caught.value
    assert error.status_code == 404
    assert (error.type, error.param, error.code) == (
        "invalid_request_error",
        "model",
        "model_not_found",
    )
    body = error.response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "gpt-5-turbo" in body["error"]["message"]
    assert primary.calls + secondary.calls == 0


async def test_the_model_list_names_auto_and_the_enabled_providers(
    live_url, providers_configured, secondary
):
    await sync_to_async(Provider.objects.create)(
        name="openai-spare",
        kind="openai",
        base_url=secondary.url,
        model="gpt-4o-mini",
        priority=30,
        enabled=False,
    )
    async with sdk(live_url) as client:
        models = [model async for model in client.models.list()]
    # The disabled provider's gpt-4o-mini is listed once, as openai-cloud's.
    assert [(model.id, model.owned_by) for model in models] == [
        ("auto", "failover"),
        ("ollama-local", "ollama"),
        ("openai-cloud", "openai"),
        ("llama3.1:8b", "ollama"),
        ("gpt-4o-mini", "openai"),
    ]
    assert {model.object for model in models} == {"model"}
    assert models[1].model_extra["upstream_model"] == "llama3.1:8b"


# Mistakes, in OpenAI's error shape (httpx over ASGI: nothing here streams) -----------------


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": HELLO, **fields}


@pytest.mark.parametrize(
    ("body", "param", "code", "fragment"),
    [
        (b"{not json", None, "invalid_json", "not valid JSON"),
        (b'["a", "list"]', None, "invalid_json", "JSON object"),
        ({"model": "auto"}, "messages", "invalid_field", "non-empty list"),
        ({"messages": HELLO}, "model", "invalid_field", "required"),
        (
            _chat(messages=[*HELLO, {"role": "assistant", "content": "Hello."}]),
            "messages",
            "invalid_field",
            "must be the user's",
        ),
        (
            _chat(messages=[{"role": "system", "content": "Be brief."}]),
            "messages",
            "invalid_field",
            "must be the user's",
        ),
        (
            _chat(tools=[{"type": "custom", "custom": {"name": "f"}}]),
            "tools[0].type",
            "unsupported_parameter",
            "Only function tools",
        ),
        (
            _chat(tools=[{"type": "function", "function": {"name": "no spaces"}}]),
            "tools[0].function.name",
            "invalid_field",
            "at most 64 characters",
        ),
        (_chat(tool_choice="auto"), "tool_choice", "invalid_field", "only allowed when"),
        (
            _chat(
                tools=[{"type": "function", "function": {"name": "f"}}],
                tool_choice={"type": "function", "function": {"name": "g"}},
            ),
            "tool_choice",
            "invalid_field",
            "not in 'tools'",
        ),
        (_chat(modalities=["text", "audio"]), "modalities", "unsupported_parameter", "Only text"),
        (_chat(temprature=0.2), "temprature", "invalid_field", "Unrecognized request argument"),
        (_chat(n=2), "n", "invalid_field", "'n' must be 1"),
        (_chat(stream_options={"include_usage": True}), "stream_options", "invalid_field", "only"),
        (
            _chat(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
            "response_format.json_schema.name",
            "invalid_field",
            "format's name",
        ),
        (
            _chat(messages=[{"role": "tool", "tool_call_id": "call_1", "content": "42"}]),
            "messages[0].tool_call_id",
            "invalid_field",
            "must answer a tool call",
        ),
        (
            b'{"model": "auto", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
            None,
            "invalid_json",
            "nested more than",
        ),  # fmt: skip
        (
            b'{"model": "auto", "messages": [{"role": "user", "content": "Hi \\ud800"}]}',
            "messages[0].content",
            "invalid_field",
            "lone surrogate",
        ),  # fmt: skip
    ],
    ids=[
        "invalid-json",
        "not-an-object",
        "no-messages",
        "no-model",
        "last-is-assistant",
        "only-system",
        "custom-tool",
        "tool-name",
        "tool-choice-without-tools",
        "tool-choice-unknown",
        "audio-modality",
        "unknown-field",
        "n-2",
        "stream-options-without-stream",
        "json-schema-without-name",
        "tool-message-answering-nothing",
        "nested-brackets",
        "lone-surrogate",
    ],
)
async def test_each_mistake_is_a_400_in_openais_error_shape(
    api, primary, body, param, code, fragment
):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await api.post(URL, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert fragment in error["message"]
    assert primary.calls == 0


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("GET", URL, "POST"), ("PUT", URL, "POST"), ("POST", "/v1/models", "GET")],
)
async def test_the_wrong_method_is_a_405_with_allow(api, method, path, allowed):
    response = await api.request(method, path)
    assert response.status_code == 405
    assert response.headers["Allow"] == allowed
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        None,
        "method_not_allowed",
    )


async def test_a_body_that_is_not_json_typed_is_a_415(api, primary):
    response = await api.post(
        URL, content=json.dumps(_chat()).encode(), headers={"content-type": "text/plain"}
    )
    assert response.status_code == 415
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        None,
        "unsupported_media_type",
    )
    assert primary.calls == 0


async def test_a_body_over_the_chat_limit_is_a_413_in_openais_error_shape(api, primary):
    body = _chat(messages=[{"role": "user", "content": "x" * (4 * 1024 * 1024)}])
    response = await api.post(URL, json=body)
    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        None,
        "body_too_large",
    )
    assert "4194304 bytes (4 MiB) on /v1/chat/completions" in error["message"]
    assert primary.calls == 0


async def test_an_oversize_body_without_a_length_is_cut_off_with_a_413_in_openais_shape(
    api, primary
):
    async def endless():
        for _ in range(1000):  # 16 MiB if nobody stops reading
            yield b" " * 16_384

    response = await api.post(URL, content=endless(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "body_too_large")
    assert primary.calls == 0


async def test_an_unknown_host_is_refused_in_openais_error_shape(api):
    response = await api.post(URL, json=_chat(), headers={"host": "evil.example"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_host")


async def test_an_unknown_v1_path_is_a_json_404_in_openais_error_shape(api):
    response = await api.get("/v1/nope")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        None,
        "not_found",
    )


# An Anthropic provider in the cascade -----------------------------------------------------


@pytest.fixture
def claude() -> Iterator[FakeProvider]:
    """The fake provider as Anthropic: it serves /v1/messages and wants the key."""
    with FakeProvider(models=[CLAUDE_MODEL], api_key=CLAUDE_KEY, text=CLAUDE_TEXT) as fake:
        yield fake


@pytest.fixture
def anthropic_between(providers_configured, claude, monkeypatch) -> Provider:
    """An Anthropic provider between the primary (10) and openai-cloud (20)."""
    monkeypatch.setenv("FAILOVER_SECRET_TEST_ANTHROPIC_KEY", CLAUDE_KEY)
    return Provider.objects.create(
        name="anthropic-cloud",
        kind="anthropic",
        base_url=claude.url,
        model=CLAUDE_MODEL,
        api_key_env="FAILOVER_SECRET_TEST_ANTHROPIC_KEY",
        priority=15,
        is_local=False,
        timeout_s=5,
    )


async def test_an_anthropic_provider_answers_whole_and_streamed_when_the_primary_is_down(
    anthropic_between, live_url, gateway, primary, secondary, claude
):
    primary.stop()
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
        stream = await client.chat.completions.create(model="auto", messages=HELLO, stream=True)
        chunks = [chunk async for chunk in stream]
    completion = raw.parse()
    assert completion.choices[0].message.content == CLAUDE_TEXT
    assert completion.model == "anthropic-cloud"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 3)
    assert raw.headers["X-Failover-Tier"] == "secondary"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CLAUDE_TEXT
    assert {chunk.model for chunk in chunks} == {"anthropic-cloud"}
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (claude.calls, secondary.calls) == (2, 0)


# The fake's Anthropic dialect, checked against Anthropic's own SDK --------------------------


def claude_sdk(fake: FakeProvider, key: str = CLAUDE_KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.url, api_key=key, max_retries=0, timeout=10)


async def test_the_fakes_messages_answer_parses_as_anthropics_message(claude):
    async with claude_sdk(claude) as client:
        message = await client.messages.create(
            model=CLAUDE_MODEL, max_tokens=100, system="Be brief.", messages=HELLO
        )
        cut = await client.messages.create(model=CLAUDE_MODEL, max_tokens=2, messages=HELLO)
    assert (message.type, message.role, message.model) == ("message", "assistant", CLAUDE_MODEL)
    assert [(block.type, block.text) for block in message.content] == [("text", CLAUDE_TEXT)]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (4, 3)
    assert (cut.content[0].text, cut.stop_reason, cut.usage.output_tokens) == (
        "Hello from",
        "max_tokens",
        2,
    )


async def test_the_fakes_stream_is_read_by_anthropics_stream_helper(claude):
    async with (
        claude_sdk(claude) as client,
        client.messages.stream(model=CLAUDE_MODEL, max_tokens=100, messages=HELLO) as stream,
    ):
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == CLAUDE_TEXT and len(pieces) == 3
    assert [(block.type, block.text) for block in final.content] == [("text", CLAUDE_TEXT)]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2, 3)


async def test_the_fakes_overloaded_fault_is_anthropics_529(claude):
    claude.set_fault(mode="overloaded")
    async with claude_sdk(claude) as client:
        with pytest.raises(anthropic.OverloadedError) as caught:
            await client.messages.create(model=CLAUDE_MODEL, max_tokens=100, messages=HELLO)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(
    ("fault", "key"),
    [({"mode": "unauthorized"}, CLAUDE_KEY), ({}, "sk-ant-wrong")],
    ids=["unauthorized-fault", "wrong-key"],
)
async def test_the_fakes_401_is_anthropics_authentication_error(claude, fault, key):
    claude.set_fault(**fault)
    async with claude_sdk(claude, key) as client:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await client.messages.create(model=CLAUDE_MODEL, max_tokens=100, messages=HELLO)
    assert caught.value.status_code == 401
    assert caught.value.body["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("field", ["seed", "max_tokens", "temperature", "presence_penalty"])
async def test_an_integer_past_any_float_is_a_400_naming_its_field(api, gateway, primary, field):
    body = (
        b'{"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "'
        + field.encode()
        + b'": 1'
        + b"0" * 400
        + b"}"
    )
    response = await api.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field
    assert primary.calls == 0
