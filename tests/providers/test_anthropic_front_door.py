"""Anthropic's Messages API in front: `POST /v1/messages` driven with the official `anthropic`
SDK (whole, streamed, tools, a failover, every refusal in Anthropic's error shape), with
Ollama, an OpenAI-compatible provider or Anthropic itself behind."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from asgiref.sync import sync_to_async
from pydantic import TypeAdapter

from providers.models import ClientApp
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import CLAUDE_MODEL, ledger_rows
from tests.providers.test_openai_endpoint import static_answer

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "Say hello."}]
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
STATIC_QUESTION = [{"role": "user", "content": "What are your opening hours?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_ID = "toolu_01abc"
RESULT_TURN = [
    *ASK,
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {
                "type": "tool_use",
                "id": TOOL_ID,
                "name": "get_weather",
                "input": {"city": "Paris", "unit": "c"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": TOOL_ID, "content": "22 degrees and sunny"}
        ],
    },
]
# The lifecycle of a streamed text answer, as Anthropic sends it.
TEXT_EVENTS = ["message_start", "ping", "content_block_start", "content_block_delta"]


# Anthropic's published shapes, as the SDK types them, checked strictly (the SDK itself builds
# an answer's objects without validating them).
MESSAGE = TypeAdapter(Message)
STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)


def sdk(live_url: str, key: str = TEST_CLIENT_KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=live_url, api_key=key, max_retries=0, timeout=30)


async def events(live_url: str, body: dict[str, Any]) -> tuple[int, list[tuple[str, Any]]]:
    """A streamed answer's status and its (event, data) pairs, as sent."""
    headers = {"x-api-key": TEST_CLIENT_KEY, "anthropic-version": "2023-06-01"}
    async with (
        httpx.AsyncClient(timeout=30, headers=headers) as http,
        http.stream("POST", live_url + "/v1/messages", json=body) as response,
    ):
        text = (await response.aread()).decode()
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.status_code, [("json", json.loads(text))]
    pairs = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        if lines["event"] not in ("ping", "error"):  # the SDK's union holds the rest
            STREAM_EVENT.validate_python(data)
        pairs.append((lines["event"], data))
    return response.status_code, pairs


# Whole and streamed ------------------------------------------------------------------------


async def test_a_message_from_the_healthy_primary(live_url, gateway, primary, secondary):
    async with sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=200, messages=HELLO
        )
        message = raw.parse()
    MESSAGE.validate_json(raw.content)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == PRIMARY_TEXT
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (2, 5)
    assert message.model == "ollama-local"
    assert message.model_extra["failover"]["tier"] == "primary"
    assert raw.headers["X-Failover-Tier"] == "primary"
    [record] = await ledger_rows(gateway, at_least=1)
    assert (record.final_provider, record.outcome) == ("ollama-local", "ok")


async def test_a_streamed_message_arrives_as_anthropics_typed_events(
    live_url, gateway, primary, secondary
):
    async with (
        sdk(live_url) as client,
        client.messages.stream(model="auto", max_tokens=200, messages=HELLO) as stream,
    ):
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == PRIMARY_TEXT
    assert final.content[0].text == PRIMARY_TEXT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5

    status, sent = await events(
        live_url, {"model": "auto", "max_tokens": 200, "messages": HELLO, "stream": True}
    )
    kinds = [kind for kind, _ in sent]
    assert status == 200
    assert kinds[: len(TEXT_EVENTS)] == TEXT_EVENTS
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[len(TEXT_EVENTS) : -3]) == {"content_block_delta"}
    start = sent[0][1]["message"]
    assert (start["content"], start["stop_reason"]) == ([], None)
    assert sent[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    await ledger_rows(gateway, at_least=2)


# Failover -------------------------------------------------------------------------------


async def test_a_failover_mid_request_answers_from_the_secondary(
    live_url, gateway, primary, secondary
):
    primary.set_fault(mode="error")
    async with sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=200, messages=HELLO
        )
        message = raw.parse()
        async with client.messages.stream(model="auto", max_tokens=200, messages=HELLO) as stream:
            streamed = await stream.get_final_message()
    assert message.content[0].text == SECONDARY_TEXT
    assert streamed.content[0].text == SECONDARY_TEXT
    assert message.model == streamed.model == "openai-cloud"
    assert raw.headers["X-Failover-Tier"] == "secondary"
    records = await ledger_rows(gateway, at_least=2)
    assert {record.final_provider for record in records} == {"openai-cloud"}


async def test_the_static_tier_answers_as_a_message(live_url, primary, secondary):
    primary.stop()
    secondary.stop()
    async with sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=200, messages=STATIC_QUESTION
        )
        async with client.messages.stream(
            model="auto", max_tokens=200, messages=STATIC_QUESTION
        ) as stream:
            streamed = await stream.get_final_message()
    assert message.content[0].text == static_answer("opening hours")
    assert streamed.content[0].text == static_answer("opening hours")
    failover = message.model_extra["failover"]
    assert (failover["tier"], failover["is_fallback"]) == ("static", True)


async def test_with_nothing_to_stand_in_a_failure_before_content_is_a_clean_error_status(
    live_url, primary, secondary
):
    """No provider answers and the app takes no stand-in: a 503 in Anthropic's shape, whole
    and streamed alike (no event is sent before the answer's first piece)."""
    await sync_to_async(ClientApp.objects.filter(name="suite").update)(
        accept_cached=False, accept_static=False, accept_degraded=False
    )
    primary.stop()
    secondary.stop()
    async with sdk(live_url) as client:
        with pytest.raises(anthropic.APIStatusError) as whole:
            await client.messages.create(model="auto", max_tokens=200, messages=STATIC_QUESTION)
        with pytest.raises(anthropic.APIStatusError) as streamed:
            async with client.messages.stream(
                model="auto", max_tokens=200, messages=STATIC_QUESTION
            ) as stream:
                await stream.get_final_message()
    for caught in (whole, streamed):
        assert caught.value.status_code == 503
        assert caught.value.body["type"] == "error"
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert caught.value.response.headers["Retry-After"]
    status, sent = await events(
        live_url, {"model": "auto", "max_tokens": 200, "messages": STATIC_QUESTION, "stream": True}
    )
    assert status == 503 and sent[0][0] == "json"


async def test_a_stream_that_breaks_after_its_first_piece_ends_with_an_error_event(
    live_url, gateway, primary, secondary
):
    primary.set_fault(mode="cut_stream", delay_ms=200)
    status, sent = await events(
        live_url, {"model": "auto", "max_tokens": 200, "messages": HELLO, "stream": True}
    )
    kinds = [kind for kind, _ in sent]
    assert status == 200
    assert kinds[0] == "message_start" and kinds[-1] == "error"
    assert "message_stop" not in kinds
    assert sent[-1][1]["error"]["type"] == "api_error"
    assert secondary.calls == 0  # nothing from another provider spliced in


# Tools ----------------------------------------------------------------------------------


async def test_a_tool_call_comes_back_as_a_tool_use_block(live_url, gateway, primary, secondary):
    async with sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=200, messages=ASK, tools=[WEATHER]
        )
        async with client.messages.stream(
            model="auto", max_tokens=200, messages=ASK, tools=[WEATHER]
        ) as stream:
            streamed = await stream.get_final_message()
    MESSAGE.validate_json(raw.content)
    for answer in (raw.parse(), streamed):
        assert answer.stop_reason == "tool_use"
        [call] = [block for block in answer.content if block.type == "tool_use"]
        assert call.name == "get_weather" and call.id
        assert call.input == {"city": "example", "unit": "c"}
    _, sent = await events(
        live_url,
        {"model": "auto", "max_tokens": 200, "messages": ASK, "tools": [WEATHER], "stream": True},
    )
    starts = [data["content_block"] for kind, data in sent if kind == "content_block_start"]
    assert [block["type"] for block in starts] == ["tool_use"]
    partial = "".join(
        data["delta"]["partial_json"]
        for kind, data in sent
        if kind == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "example", "unit": "c"}


async def test_a_tool_result_reaches_the_provider_as_its_own_turn(
    live_url, gateway, primary, secondary
):
    async with sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=200, messages=RESULT_TURN, tools=[WEATHER]
        )
    assert message.content[0].text == "The tool said: 22 degrees and sunny"
    assert message.stop_reason == "end_turn"
    sent = primary.last_request("/api/chat")["body"]["messages"]
    assert sent[-2]["content"] == "Let me look."
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "unit": "c"}
    assert sent[-1] == {
        "role": "tool",
        "tool_name": "get_weather",
        "content": "22 degrees and sunny",
    }


async def test_anthropic_behind_answers_anthropic_in_front(
    live_url,
    gateway,
    anthropic_only,
    claude,  # noqa: F811
):
    async with sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=200, messages=ASK, tools=[WEATHER], system="Be brief."
        )
    assert message.model == "anthropic-cloud"
    [call] = [block for block in message.content if block.type == "tool_use"]
    assert call.input == {"city": "example", "unit": "c"}
    sent = claude.last_request("/v1/messages")["body"]
    assert sent["model"] == CLAUDE_MODEL
    assert sent["system"] == "Be brief."
    assert sent["tools"][0]["input_schema"] == WEATHER["input_schema"]


# Refusals, in Anthropic's shape ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "kind", "message"),
    [
        (
            {"model": "auto", "messages": HELLO},
            400,
            "invalid_request_error",
            "'max_tokens' is required",
        ),
        (
            {"model": "auto", "max_tokens": 10, "messages": HELLO, "top_n": 5},
            400,
            "invalid_request_error",
            "top_n: Extra inputs are not permitted",
        ),
        (
            {"model": "auto", "max_tokens": 10, "messages": HELLO, "temperature": 1.5},
            400,
            "invalid_request_error",
            "temperature",
        ),
        (
            {
                "model": "auto",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            400,
            "invalid_request_error",
            "messages.0.content.0.type: This gateway takes no document blocks",
        ),
        (
            {
                "model": "auto",
                "max_tokens": 10,
                "messages": [*HELLO, {"role": "assistant", "content": "Hel"}],
            },
            400,
            "invalid_request_error",
            "prefill",
        ),
        (
            {
                "model": "auto",
                "max_tokens": 10,
                "messages": HELLO,
                "thinking": {"type": "enabled", "budget_tokens": 2000},
            },
            400,
            "invalid_request_error",
            "thinking.budget_tokens: budget_tokens must be less than max_tokens",
        ),
        (
            {"model": "no-such-model", "max_tokens": 10, "messages": HELLO},
            404,
            "not_found_error",
            "no-such-model",
        ),
    ],
)
async def test_a_request_anthropic_would_refuse_is_refused_in_its_shape(
    live_url, primary, secondary, body, status, kind, message
):
    got, sent = await events(live_url, body)
    [(_, answer)] = sent
    assert got == status
    assert answer["type"] == "error"
    assert answer["error"]["type"] == kind
    assert message in answer["error"]["message"]
    assert primary.calls == 0


async def test_a_wrong_key_is_an_authentication_error(live_url, primary, secondary):
    async with sdk(live_url, key="fgw_not-a-key-of-this-gateway-0000000000000000000") as client:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await client.messages.create(model="auto", max_tokens=10, messages=HELLO)
    assert caught.value.body["error"]["type"] == "authentication_error"


async def test_a_body_past_the_limit_is_refused_in_anthropics_shape(live_url, settings):
    settings.BODY_LIMIT_CHAT_BYTES = 1000
    got, sent = await events(
        live_url,
        {"model": "auto", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 2000}]},
    )
    assert got == 413
    assert sent[0][1]["error"]["type"] == "request_too_large"


async def test_count_tokens_estimates_the_conversation(live_url, primary, secondary):
    async with sdk(live_url) as client:
        short = await client.messages.count_tokens(model="auto", messages=HELLO)
        longer = await client.messages.count_tokens(
            model="auto", messages=RESULT_TURN, tools=[WEATHER], system="Be brief."
        )
    assert 0 < short.input_tokens < longer.input_tokens
    assert primary.calls == 0 and secondary.calls == 0


async def test_a_request_over_every_context_window_is_refused_in_anthropics_words(
    live_url, primary, secondary
):
    """As Anthropic says it, with its numbers: a client written for Anthropic's API reads them
    to ask again for a shorter answer."""
    status, sent = await events(
        live_url, {"model": "auto", "max_tokens": 20_000, "messages": HELLO}
    )
    assert status == 400
    message = sent[0][1]["error"]["message"]
    found = re.fullmatch(
        r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+), "
        r"decrease input length or `max_tokens` and try again",
        message,
    )
    assert found is not None, message
    assert (int(found[2]), int(found[3])) == (20_000, 8192)
