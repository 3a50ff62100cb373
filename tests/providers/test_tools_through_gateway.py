"""Tools and structured output through the cascade, driven with the official `openai` SDK and
`langchain-openai` against the gateway, with each dialect behind it (the fake provider answers
tool calls, tool results and JSON as the real APIs do)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from asgiref.sync import sync_to_async
from pydantic import BaseModel

from providers.models import Provider
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows
from tests.spec import assert_openai, sse_events

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/chat/completions"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_ID = "call_abc123"
RESULT_TURN = [
    *ASK,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": "22 degrees and sunny"},
]


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def _only(name: str) -> None:
    Provider.objects.exclude(name=name).update(enabled=False)


async def _chat(api, **body: Any):
    return await api.post(URL, json={"model": "auto", **body})


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call["function"]["arguments"])


# Each dialect, whole and streamed ---------------------------------------------------------

DIALECTS = ["ollama-local", "openai-cloud", "anthropic-cloud"]


@pytest.fixture(params=DIALECTS)
def dialect(request, providers_configured, claude, monkeypatch) -> str:
    """The one provider the request can reach, of each kind in turn."""
    name = request.param
    if name == "anthropic-cloud":
        request.getfixturevalue("anthropic_only")
    else:
        _only(name)
    return name


async def test_a_tool_call_comes_back_in_openais_shape_from_every_dialect(api, gateway, dialect):
    response = await _chat(api, messages=ASK, tools=[WEATHER])
    assert response.status_code == 200, response.text
    body = response.json()
    assert_openai("CreateChatCompletionResponse", body)
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"]
    assert call["function"]["name"] == "get_weather"
    assert _arguments(call) == {"city": "example", "unit": "c"}
    [record] = await ledger_rows(gateway)
    assert (record.final_provider, record.outcome) == (dialect, "ok")


async def test_a_streamed_tool_call_arrives_as_openais_deltas_from_every_dialect(
    api, gateway, dialect
):
    response = await _chat(api, messages=ASK, tools=[WEATHER], stream=True)
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    for chunk in chunks:
        assert_openai("CreateChatCompletionStreamResponse", chunk)
    pieces = [
        call
        for chunk in chunks
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]
    assert pieces[0]["id"] and pieces[0]["function"]["name"] == "get_weather"
    assert {piece["index"] for piece in pieces} == {0}
    arguments = "".join(piece["function"]["arguments"] for piece in pieces)
    assert json.loads(arguments) == {"city": "example", "unit": "c"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_tool_result_turn_reaches_every_dialect_in_its_own_shape(
    api, gateway, dialect, primary, secondary, claude
):
    response = await _chat(api, messages=RESULT_TURN, tools=[WEATHER])
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]
    assert answer["message"]["content"] == "The tool said: 22 degrees and sunny"
    assert answer["finish_reason"] == "stop"
    if dialect == "ollama-local":
        sent = primary.last_request("/api/chat")["body"]["messages"]
        assert sent[-2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "unit": "c"}
        assert sent[-1] == {
            "role": "tool",
            "tool_name": "get_weather",
            "content": "22 degrees and sunny",
        }
    elif dialect == "anthropic-cloud":
        sent = claude.last_request("/v1/messages")["body"]["messages"]
        assert sent[-2]["content"][0]["type"] == "tool_use"
        assert sent[-1]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": CALL_ID,
            "content": "22 degrees and sunny",
        }
    else:
        sent = secondary.last_request("/v1/chat/completions")["body"]["messages"]
        assert sent[-1] == {
            "role": "tool",
            "tool_call_id": CALL_ID,
            "content": "22 degrees and sunny",
        }


class Weather(BaseModel):
    city: str
    celsius: int


async def test_the_sdks_parse_gets_a_typed_answer_from_every_dialect(live_url, gateway, dialect):
    async with sdk(live_url) as client:
        completion = await client.chat.completions.parse(
            model="auto", messages=ASK, response_format=Weather
        )
    parsed = completion.choices[0].message.parsed
    assert parsed == Weather(city="example", celsius=1)


# The SDK's own view of tool calls ---------------------------------------------------------


STRICT_WEATHER = {
    "type": "function",
    "function": {
        **WEATHER["function"],
        "strict": True,
        "parameters": {**WEATHER["function"]["parameters"], "additionalProperties": False},
    },
}


async def test_the_sdk_reads_a_tool_call_whole_and_streamed(live_url, gateway, primary):
    async with sdk(live_url) as client:
        whole = await client.chat.completions.create(model="auto", messages=ASK, tools=[WEATHER])
        [call] = whole.choices[0].message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)["city"]) == (
            "get_weather",
            "example",
        )
        # The SDK's stream helper parses the arguments of strict tools as they arrive.
        async with client.chat.completions.stream(
            model="auto", messages=ASK, tools=[STRICT_WEATHER]
        ) as stream:
            done = [
                event
                async for event in stream
                if event.type == "tool_calls.function.arguments.done"
            ]
            final = await stream.get_final_completion()
    assert done[0].parsed_arguments == {"city": "example", "unit": "c"}
    [streamed] = final.choices[0].message.tool_calls
    assert streamed.function.name == "get_weather"
    assert streamed.function.parsed_arguments == {"city": "example", "unit": "c"}


async def test_langchain_binds_tools_and_gets_structured_output(live_url, gateway):
    from langchain_core.messages import ToolMessage
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="auto", base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    )

    def get_weather(city: str, unit: str) -> str:
        """The weather in a city now."""
        return f"{city}: 22 {unit}"

    asked = await model.bind_tools([get_weather]).ainvoke("What is the weather in Paris?")
    [call] = asked.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"] == "example"
    answered = await model.bind_tools([get_weather]).ainvoke(
        [
            ("user", "What is the weather in Paris?"),
            asked,
            ToolMessage(content="22 degrees", tool_call_id=call["id"]),
        ]
    )
    assert answered.content == "The tool said: 22 degrees"
    weather = await model.with_structured_output(Weather).ainvoke("Weather in Paris?")
    assert weather == Weather(city="example", celsius=1)


# Who can serve a tool request -------------------------------------------------------------


async def test_a_provider_that_cant_call_tools_is_passed_over_with_its_reason(api, gateway):
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(supports_tools=False)
    response = await _chat(api, messages=ASK, tools=[WEATHER])
    assert response.json()["model"] == "openai-cloud"
    [record] = await ledger_rows(gateway)
    assert record.attempts[0] == {
        "provider": "ollama-local",
        "outcome": "skipped",
        "error_class": "cannot_serve",
        "detail": "tools: its settings say it can't call tools",
    }


async def test_when_no_provider_can_take_a_parameter_the_client_hears_which(
    api, gateway, primary, secondary
):
    await sync_to_async(Provider.objects.update)(supports_json_output=False)
    response = await _chat(api, messages=ASK, response_format={"type": "json_object"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_by_providers", "response_format")
    assert "ollama-local" in error["message"] and "openai-cloud" in error["message"]
    assert primary.calls == secondary.calls == 0


async def test_with_every_provider_down_a_tool_request_gets_a_503_never_a_prepared_text(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    # "opening hours" has a static answer, which a plain request would get.
    asked = [{"role": "user", "content": "What are your opening hours?"}]
    response = await _chat(api, messages=asked, tools=[WEATHER])
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "providers_unavailable"
    plain = await _chat(api, messages=asked)
    assert plain.status_code == 200 and plain.json()["failover"]["tier"] == "static"


# The parameter table, from the upstream's side ---------------------------------------------


async def test_each_parameter_reaches_each_dialect_where_its_table_says(
    api, gateway, primary, secondary
):
    sent = {"seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25, "user": "u-1"}
    response = await _chat(api, messages=ASK, **sent)
    assert response.json()["model"] == "ollama-local"
    options = primary.last_request("/api/chat")["body"]["options"]
    assert (options["seed"], options["presence_penalty"], options["frequency_penalty"]) == (
        7,
        0.5,
        0.25,
    )
    assert "user" not in primary.last_request("/api/chat")["body"]  # Ollama has no such field
    # Token biases only OpenAI-compatible APIs take: Ollama is passed over for it.
    biased = await _chat(api, messages=ASK, logit_bias={"1734": -100}, **sent)
    assert biased.json()["model"] == "openai-cloud"
    body = secondary.last_request(URL)["body"]
    assert {key: body[key] for key in [*sent, "logit_bias"]} == {
        **sent,
        "logit_bias": {"1734": -100},
    }


async def test_the_token_limit_goes_in_the_field_the_provider_takes(api, gateway, secondary):
    await sync_to_async(_only)("openai-cloud")
    await _chat(api, messages=ASK, max_completion_tokens=50)
    assert secondary.last_request(URL)["body"]["max_tokens"] == 50
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        token_limit_field="max_completion_tokens"
    )
    gateway.snapshots.mark_stale()
    await gateway.snapshots.refresh()
    await _chat(api, messages=ASK, max_tokens=40)
    body = secondary.last_request(URL)["body"]
    assert body["max_completion_tokens"] == 40 and "max_tokens" not in body


async def test_an_anthropic_json_answer_comes_from_its_forced_tool(
    api, gateway, anthropic_only, claude
):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    response = await _chat(
        api,
        messages=ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
        stream=True,
    )
    chunks = [event for event in sse_events(response.text) if event != "[DONE]"]
    text = "".join(
        choice["delta"].get("content", "") for chunk in chunks for choice in chunk["choices"]
    )
    assert json.loads(text) == {"city": "example"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    sent = claude.last_request("/v1/messages")["body"]
    assert sent["tool_choice"] == {"type": "tool", "name": "place"}
    assert sent["tools"][0]["input_schema"] == schema
