"""`POST /v1/responses`, the Responses API's text subset: the official SDK against the real
server (whole, streamed, a tool call and its output, structured output), every answer and every
stream event checked against OpenAI's published schemas and the gateway's own documented ones,
a broken stream, a client that hangs up, and the refusals of what the gateway can't serve."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema_rs
import openai
import pytest

from edge.api.json_body import ApiError
from edge.api.openai import responses_request
from edge.api.openapi import openapi_document
from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows
from tests.providers.test_openai_streaming import the_ledger_row
from tests.spec import assert_openai, openai_document

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/responses"
PRIMARY_TEXT = "Hello from the local model."
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
COMPONENTS = openapi_document()["components"]


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def ours(name: str) -> jsonschema_rs.Validator:
    """A validator for the gateway's own documented schema `name`."""
    return jsonschema_rs.Draft202012Validator(
        {**COMPONENTS["schemas"][name], "components": COMPONENTS}
    )


def typed_events(text: str) -> list[dict[str, Any]]:
    """Each event of a stream as its JSON data, checked to be named (`event:`) by its type."""
    events = []
    for block in re.split(r"\n\n", text.strip()):
        name = re.search(r"^event: (.+)$", block, re.MULTILINE)
        data = re.search(r"^data: (.+)$", block, re.MULTILINE)
        assert name and data, block
        event = json.loads(data.group(1))
        assert event["type"] == name.group(1)
        events.append(event)
    return events


def checked_events(text: str) -> list[dict[str, Any]]:
    """The stream's events, each valid against OpenAI's ResponseStreamEvent and the gateway's
    documented event, numbered 0, 1, 2 … in order."""
    events = typed_events(text)
    documented = COMPONENTS["schemas"]["ResponseStreamEvent"]["properties"]["data"]
    theirs = jsonschema_rs.Draft202012Validator(
        {**documented["contentSchema"], "components": COMPONENTS}
    )
    for event in events:
        assert_openai("ResponseStreamEvent", event)
        theirs.validate(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return events


# Through the official SDK -----------------------------------------------------------------


async def test_the_sdk_gets_the_primarys_text_and_the_instructions_reach_it_as_the_system_prompt(
    live_url, primary, secondary
):
    async with sdk(live_url) as client:
        raw = await client.responses.with_raw_response.create(
            model="auto", input="Say hello.", instructions="Answer briefly."
        )
    response = raw.parse()
    assert response.output_text == PRIMARY_TEXT
    assert response.status == "completed" and response.id.startswith("resp_")
    assert response.model == "ollama-local"
    usage = response.usage
    assert usage.output_tokens == 5 and usage.input_tokens > 0  # the fake counts words
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert response.instructions == "Answer briefly."
    assert raw.headers["X-Failover-Tier"] == "primary"
    assert response.model_extra["failover"]["request_id"] == raw.headers["X-Request-Id"]
    messages = primary.last_request("/api/chat")["body"]["messages"]
    assert messages[0] == {"role": "system", "content": "Answer briefly."}
    assert messages[-1] == {"role": "user", "content": "Say hello."}


async def test_the_sdk_streams_the_text_and_the_completed_event_carries_it(
    live_url, gateway, primary, secondary
):
    async with sdk(live_url) as client:
        stream = await client.responses.create(model="auto", input="Say hello.", stream=True)
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == PRIMARY_TEXT and len(deltas) > 1
    assert events[-1].response.output_text == PRIMARY_TEXT
    assert events[-1].response.usage.output_tokens == 5
    [record] = await ledger_rows(gateway, at_least=1)  # after the last byte
    assert (record.outcome, record.final_provider) == ("ok", "ollama-local")


async def test_the_sdks_stream_helpers_build_the_text_and_the_tool_call_from_the_events(
    live_url, primary, secondary
):
    async with sdk(live_url) as client:
        async with client.responses.stream(model="auto", input="Say hello.") as stream:
            texts = [event.delta async for event in stream if event.type.endswith("text.delta")]
            final = await stream.get_final_response()
        assert "".join(texts) == final.output_text == PRIMARY_TEXT
        async with client.responses.stream(
            model="auto", input="Weather in Paris?", tools=[WEATHER]
        ) as stream:
            called = await stream.get_final_response()
    [call] = called.output
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call",
        "get_weather",
        {"city": "example"},
    )


async def test_the_sdk_reads_a_tool_call_and_the_answer_to_its_output(live_url, primary, secondary):
    async with sdk(live_url) as client:
        asked = await client.responses.create(
            model="auto", input="What is the weather in Paris?", tools=[WEATHER]
        )
        [call] = asked.output
        assert (call.type, call.name, call.status) == ("function_call", "get_weather", "completed")
        assert json.loads(call.arguments) == {"city": "example"}
        # The SDK's own pattern: the earlier output items sent back, then the tool's output.
        answered = await client.responses.create(
            model="auto",
            tools=[WEATHER],
            input=[
                {"role": "user", "content": "What is the weather in Paris?"},
                *asked.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny."},
            ],
        )
    assert answered.output_text == "The tool said: Sunny."
    sent = primary.last_request("/api/chat")["body"]
    assert sent["messages"][-1]["role"] == "tool"
    assert sent["tools"][0]["function"]["name"] == "get_weather"


async def test_the_sdk_gets_json_text_for_a_json_schema_format(live_url, primary, secondary):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    async with sdk(live_url) as client:
        response = await client.responses.create(
            model="auto",
            input="Say hello.",
            text={"format": {"type": "json_schema", "name": "hello", "schema": schema}},
        )
    assert isinstance(json.loads(response.output_text), dict)
    assert response.text.format.type == "json_schema"
    assert primary.last_request("/api/chat")["body"]["format"] == schema


async def test_langchain_on_the_responses_api_calls_a_tool_and_reads_its_answer(
    live_url, primary, secondary
):
    # Imported here: LangChain is slow to import, and only this test uses it.
    from langchain_core.messages import ToolMessage
    from langchain_openai import ChatOpenAI

    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return f"{city}: sunny"

    model = ChatOpenAI(
        model="auto",
        base_url=live_url + "/v1",
        api_key=TEST_CLIENT_KEY,
        max_retries=0,
        use_responses_api=True,
    ).bind_tools([get_weather])
    asked = await model.ainvoke("What is the weather in Paris?")
    [call] = asked.tool_calls
    assert call["name"] == "get_weather"
    answered = await model.ainvoke(
        [
            ("user", "What is the weather in Paris?"),
            asked,
            ToolMessage(content="Sunny.", tool_call_id=call["id"]),
        ]
    )
    assert answered.text == "The tool said: Sunny."


# The shapes, against OpenAI's schemas and the gateway's own ---------------------------------


async def test_a_whole_answer_is_openais_response_object_and_the_documented_one(api, primary):
    response = await api.post(URL, json={"model": "auto", "input": "Say hello."})
    assert response.status_code == 200
    body = response.json()
    assert_openai("Response", body)
    ours("Response").validate(body)
    [message] = body["output"]
    assert message["content"] == [
        {"type": "output_text", "text": PRIMARY_TEXT, "annotations": [], "logprobs": []}
    ]
    assert body["usage"]["input_tokens_details"]["cached_tokens"] == 0
    assert (body["error"], body["incomplete_details"], body["store"]) == (None, None, False)


SHAPED = {
    "instructions and metadata": {"instructions": "Be brief.", "metadata": {"shop": "web"}},
    "json_object": {"text": {"format": {"type": "json_object"}}},
    "json_schema": {
        "text": {
            "format": {"type": "json_schema", "name": "a", "schema": {}, "strict": True}
        }
    },
    "a named tool": {
        "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}
    },
    "store true": {"store": True, "parallel_tool_calls": False, "temperature": 0.5},
    "a conversation": {
        "input": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Hello.", "annotations": []}
            ]},
            {"role": "user", "content": "Say hello."},
        ]
    },
}  # fmt: skip


ECHOED = ("instructions", "metadata", "text", "tool_choice", "temperature", "parallel_tool_calls")


async def test_each_answer_echoes_its_request_as_openais_response_object(api, primary):
    # One test for them all: each case is one request, not worth a database of its own.
    for case, fields in SHAPED.items():
        response = await api.post(URL, json={"model": "auto", "input": "Say hello.", **fields})
        assert response.status_code == 200, (case, response.text)
        body = response.json()
        assert_openai("Response", body)
        ours("Response").validate(body)
        echoed = {name: body[name] for name in ECHOED if name in fields}
        assert echoed == {name: fields[name] for name in echoed}, case
        assert body["store"] is False


async def test_with_both_providers_down_the_static_answer_streams_as_a_completed_response(
    api, primary, secondary
):
    primary.stop()
    secondary.stop()
    body = {"model": "auto", "input": "What are your opening hours?", "stream": True}
    events = checked_events((await api.post(URL, json=body)).text)
    final = events[-1]["response"]
    assert (events[-1]["type"], final["model"], final["failover"]["tier"]) == (
        "response.completed",
        "static",
        "static",
    )
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == final["output"][0]["content"][0]["text"] != ""


async def test_a_tool_call_is_a_function_call_item_whole_and_streamed_from_both_dialects(
    api, primary, secondary
):
    body = {"model": "auto", "input": "Weather in Paris?", "tools": [WEATHER]}
    whole = (await api.post(URL, json=body)).json()
    assert_openai("Response", whole)
    ours("Response").validate(whole)
    [call] = whole["output"]
    assert call["id"].startswith("fc_") and call["call_id"]
    assert whole["tools"][0] == {**WEATHER, "strict": None}

    for model in ("auto", "openai-cloud"):  # Ollama's whole calls, OpenAI's streamed pieces
        streamed = await api.post(URL, json={**body, "model": model, "stream": True})
        events = checked_events(streamed.text)
        kinds = [event["type"] for event in events]
        assert "response.output_text.delta" not in kinds
        assert kinds.count("response.output_item.added") == 1
        [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
        assert (done["name"], json.loads(done["arguments"])) == ("get_weather", {"city": "example"})
        deltas = [e["delta"] for e in events if e["type"].endswith("arguments.delta")]
        assert "".join(deltas) == done["arguments"]
        final = events[-1]["response"]
        assert (final["model"], final["output"][0]["arguments"]) == (
            "ollama-local" if model == "auto" else model,
            done["arguments"],
        )
        ours("Response").validate(final)


async def test_an_answer_cut_at_max_output_tokens_is_incomplete_whole_and_streamed(api, primary):
    primary.set_fault(text=" ".join(f"word{i}" for i in range(40)))
    body = {"model": "auto", "input": "Say hello.", "max_output_tokens": 16}
    whole = (await api.post(URL, json=body)).json()
    assert_openai("Response", whole)
    assert (whole["status"], whole["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    assert whole["output"][0]["status"] == "incomplete"
    assert primary.last_request("/api/chat")["body"]["options"]["num_predict"] == 16

    events = checked_events((await api.post(URL, json={**body, "stream": True})).text)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_a_stream_its_provider_breaks_ends_with_an_error_event_and_nothing_spliced_in(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="cut_stream", delay_ms=50)
    response = await api.post(URL, json={"model": "auto", "input": "Say hello.", "stream": True})
    events = checked_events(response.text)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "stream_interrupted"
    kinds = {event["type"] for event in events}
    assert "response.completed" not in kinds and "response.output_item.done" not in kinds
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text and PRIMARY_TEXT.startswith(text) and text != PRIMARY_TEXT
    assert secondary.calls == 0
    [record] = await ledger_rows(gateway)
    assert (record.outcome, record.reason) == ("failed", "stream_interrupted")


async def test_a_client_that_hangs_up_mid_stream_costs_the_provider_nothing(
    live_url, gateway, primary, secondary
):
    primary.set_fault(text=" ".join(f"word{i}" for i in range(60)), chunk_delay_ms=200)
    body = {"model": "auto", "input": "Say hello.", "stream": True}
    async with (
        httpx.AsyncClient(timeout=30, headers=AUTH) as http,
        http.stream("POST", live_url + URL, json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"response.output_text.delta"' in line:
                break
    record = await the_ledger_row(gateway, timeout=5)
    assert (record.outcome, record.reason) == ("failed", "client_disconnected")
    [attempt] = record.attempts
    assert attempt["outcome"] == "ok"


# Refusals -----------------------------------------------------------------------------------

REFUSED = [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"conversation": "conv_123"}, "conversation"),
    ({"background": True}, "background"),
    ({"reasoning": {"effort": "loud"}}, "reasoning.effort"),
    ({"include": ["everything"]}, "include"),
    ({"tools": [{"type": "hosted_thing"}]}, "tools[0].type"),
    ({"truncation": "auto"}, "truncation"),
    (
        {
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_file", "file_id": "file_1"},
                    ],
                }
            ]
        },
        "input[0].content[1]",
    ),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"store": "yes"}, "store"),
    ({"temprature": 1}, "temprature"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"tool_choice": "required"}, "tool_choice"),
    (
        {
            "input": [
                {"role": "user", "content": "Hi"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"},
            ]
        },
        "input[1].call_id",
    ),
    ({"input": [{"role": "user", "content": "Hi"}, {"type": "reasoning"}]}, "input"),
    ({"input": [{"role": "assistant", "content": "Hi"}]}, "input"),
]


async def test_what_the_gateway_cant_serve_is_a_400_naming_the_field(api, primary):
    named = {}
    for fields, _ in REFUSED:
        response = await api.post(URL, json={"model": "auto", "input": "Hi", **fields})
        assert response.status_code == 400, response.text
        assert_openai("ErrorResponse", response.json())
        named[json.dumps(fields)] = response.json()["error"]["param"]
    assert named == {json.dumps(fields): param for fields, param in REFUSED}
    assert primary.calls == 0


async def test_an_unknown_model_is_a_404_in_openais_error_shape(api, primary):
    response = await api.post(URL, json={"model": "gpt-9", "input": "Hi"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


# The documented body ------------------------------------------------------------------------


@pytest.mark.backend_free
def test_the_request_takes_only_openais_fields_and_the_gateways_own():
    schemas = openai_document()["components"]["schemas"]

    def properties(name: str) -> set[str]:
        schema = schemas[name]
        found = set(schema.get("properties", {}))
        for part in schema.get("allOf", []):
            found |= (
                properties(part["$ref"].rsplit("/", 1)[1])
                if "$ref" in part
                else set(part.get("properties", {}))
            )
        return found

    documented = set(COMPONENTS["schemas"]["ResponseRequest"]["properties"])
    # client_metadata: what Codex sends on every request, which OpenAI's API takes and its
    # published document doesn't list yet.
    assert documented - properties("CreateResponse") == {
        "priority",
        "task",
        "allow_cloud",
        "cache",
        "client_metadata",
    }


CANDIDATES = [
    None, True, False, 0, 15, 16, 1.5, -3, 40_000, "", " ", "x", "auto", [], ["x"], {},
    {"type": "text"}, {"format": {"type": "json_object"}}, {"format": {"type": "text"}},
    {"format": {"type": "json_schema", "name": "a", "schema": {}}}, {"verbosity": "low"},
    {"a": "b"}, {"a": 1}, "auto", "required", {"type": "function", "name": "get_weather"},
    [WEATHER], [{**WEATHER, "strict": True}], [{"type": "function", "name": "bad name"}],
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
    [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
    [{"role": "tool", "content": "Hi"}], [{"type": "function_call_output", "call_id": "c"}],
    [{"role": "user", "content": "Hi", "type": "message"}], [{"type": "reasoning"}],
]  # fmt: skip


@pytest.mark.backend_free
def test_the_schema_and_the_validator_agree_on_every_value_of_every_field():
    """One definition drives both: for each field and each value, the documented body and the
    validator say the same. (Not tried: orders of input items, which JSON Schema can't say.)"""
    schema = ours("ResponseRequest")
    base = {"model": "auto", "input": "Hello", "tools": [WEATHER]}
    disagreements = []
    for field in [*COMPONENTS["schemas"]["ResponseRequest"]["properties"], "inptu"]:
        for value in CANDIDATES:
            body = {**base, field: value}
            documented = schema.is_valid(body)
            parsed = responses_request.parse_responses(json.dumps(body).encode())
            accepted = not isinstance(parsed, ApiError)
            if documented != accepted:
                disagreements.append((field, value, f"schema {documented}, code {accepted}"))
    assert disagreements == []
