"""The fake provider's tools and structured output, over real loopback HTTP: tool calls whole
and streamed in OpenAI's, Anthropic's and Ollama's shapes (read back by the official SDKs and
checked against OpenAI's OpenAPI document), tool results, JSON answers and the 400s."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from devtools.fake_provider.schema_instance import instance

pytestmark = pytest.mark.backend_free

REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference"
OPENAPI = REFERENCE / "openai-openapi.json"
KEY = "sk-fake-tools"
GPT, CLAUDE, LLAMA = "gpt-4o-mini", "claude-3-5-haiku", "llama3.1:8b"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "note": {"type": "string"},
    },
    "required": ["city", "unit", "days"],
}
WEATHER_ARGS = {"city": "example", "unit": "celsius", "days": 1}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
ANTHROPIC_TOOLS = [
    {"name": "get_weather", "description": "The weather", "input_schema": WEATHER},
    {"name": "get_time", "input_schema": {"type": "object"}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@cache
def _validator(schema_name: str) -> Any:
    from jsonschema.validators import Draft202012Validator
    from referencing import Registry, Resource

    if not OPENAPI.exists():
        pytest.skip(f"the OpenAI reference {OPENAPI} is absent")
    document = _nullable_as_null(json.loads(OPENAPI.read_text()))
    resource = Resource.from_contents(document, default_specification=_draft())
    registry = Registry().with_resource("urn:openai", resource)
    ref = {"$ref": f"urn:openai#/components/schemas/{schema_name}"}
    return Draft202012Validator(ref, registry=registry)


def _nullable_as_null(node: Any) -> Any:
    """The document's OpenAPI 3.0 leftovers (`nullable: true`) as JSON Schema: null allowed."""
    if isinstance(node, list):
        return [_nullable_as_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _nullable_as_null(value) for key, value in node.items()}
    if node.pop("nullable", False) is True:
        return {"anyOf": [{"type": "null"}, node]}
    return node


def _draft() -> Any:
    from referencing.jsonschema import DRAFT202012

    return DRAFT202012


def assert_openai(schema_name: str, body: Any) -> None:
    errors = list(_validator(schema_name).iter_errors(body))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:3]]


@pytest.fixture(scope="module")
def server():
    with FakeProvider(models=[GPT, CLAUDE, LLAMA], api_key=KEY) as fake:
        yield fake


@pytest.fixture
def fake(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def client(fake):
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    with httpx.Client(base_url=fake.url, timeout=5, headers=headers) as client:
        yield client


@pytest.fixture
def oai(fake):
    with openai.OpenAI(base_url=fake.url + "/v1", api_key=KEY, max_retries=0) as client:
        yield client


@pytest.fixture
def claude(fake):
    with anthropic.Anthropic(base_url=fake.url, api_key=KEY, max_retries=0) as client:
        yield client


def sse_data(response: httpx.Response) -> list[Any]:
    return [
        json.loads(line[6:])
        for line in response.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


class TestSchemaInstance:
    def test_an_object_gets_its_required_properties_only(self):
        assert instance(WEATHER) == WEATHER_ARGS

    def test_refs_branches_arrays_and_scalars_are_filled_minimally(self):
        schema = {
            "type": "object",
            "$defs": {
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}},
                    "required": ["x"],
                }
            },
            "properties": {
                "where": {"$ref": "#/$defs/point"},
                "tags": {"type": "array", "items": {"type": "boolean"}},
                "either": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                "kind": {"const": "fixed"},
                "maybe": {"type": ["null", "integer"]},
            },
            "required": ["where", "tags", "either", "kind", "maybe"],
        }
        assert instance(schema) == {
            "where": {"x": 1.5},
            "tags": [True],
            "either": None,
            "kind": "fixed",
            "maybe": 1,
        }


class TestOpenAITools:
    def test_a_whole_answer_calls_the_first_tool_with_schema_arguments(self, client, oai):
        raw = client.post(
            "/v1/chat/completions", json={"model": GPT, "messages": ASK, "tools": OPENAI_TOOLS}
        ).json()
        assert_openai("CreateChatCompletionResponse", raw)
        completion = oai.chat.completions.create(model=GPT, messages=ASK, tools=OPENAI_TOOLS)
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.id.startswith("call_") and call.type == "function"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == WEATHER_ARGS

    def test_a_named_tool_choice_picks_that_tool_and_tool_arguments_override(self, fake, oai):
        fake.set_fault(tool_arguments={"zone": "UTC"})
        choice = {"type": "function", "function": {"name": "get_time"}}
        completion = oai.chat.completions.create(
            model=GPT, messages=ASK, tools=OPENAI_TOOLS, tool_choice=choice
        )
        call = completion.choices[0].message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "get_time",
            {"zone": "UTC"},
        )

    def test_tool_choice_none_answers_with_the_configured_text(self, oai):
        completion = oai.chat.completions.create(
            model=GPT, messages=ASK, tools=OPENAI_TOOLS, tool_choice="none"
        )
        assert completion.choices[0].message.content == DEFAULT_TEXT
        assert completion.choices[0].message.tool_calls is None

    def test_a_streamed_call_sends_id_and_name_first_then_argument_fragments(self, client, oai):
        body = {
            "model": GPT,
            "messages": ASK,
            "tools": OPENAI_TOOLS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        response = client.post("/v1/chat/completions", json=body)
        chunks = sse_data(response)
        for chunk in chunks:
            assert_openai("CreateChatCompletionStreamResponse", chunk)
        first = chunks[0]["choices"][0]["delta"]
        assert first["role"] == "assistant" and first["content"] is None
        assert first["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
        fragments = [
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in chunks[1:-2]
        ]
        assert len(fragments) > 1
        assert json.loads("".join(fragments)) == WEATHER_ARGS
        assert chunks[-2]["choices"][0] == {
            "index": 0,
            "delta": {},
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
        assert chunks[-1]["usage"]["completion_tokens"] == len(fragments)
        assert response.text.endswith("data: [DONE]\n\n")
        with oai.chat.completions.stream(model=GPT, messages=ASK, tools=OPENAI_TOOLS) as stream:
            final = stream.get_final_completion()
        call = final.choices[0].message.tool_calls[0]
        assert json.loads(call.function.arguments) == WEATHER_ARGS

    def test_a_tool_result_is_answered_with_text_quoting_it(self, client, oai):
        messages = [
            *ASK,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees and sunny"},
        ]
        completion = oai.chat.completions.create(model=GPT, messages=messages, tools=OPENAI_TOOLS)
        assert completion.choices[0].message.content == "The tool said: 22 degrees and sunny"
        assert completion.choices[0].finish_reason == "stop"
        assert completion.usage.prompt_tokens == 6 + 4
        body = {"model": GPT, "messages": messages, "stream": True}
        chunks = sse_data(client.post("/v1/chat/completions", json=body))
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == "The tool said: 22 degrees and sunny"

    @pytest.mark.parametrize(
        ("change", "param"),
        [
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
            ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
            ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
            ({"tools": None, "tool_choice": "required"}, "tool_choice"),
            (
                {"messages": [*ASK, {"role": "tool", "tool_call_id": "call_x", "content": "hi"}]},
                "messages.[1].role",
            ),
            (
                {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
                "response_format.json_schema.name",
            ),
        ],
    )
    def test_malformed_tools_choices_and_results_are_a_400(self, client, change, param):
        body = {"model": GPT, "messages": ASK, "tools": OPENAI_TOOLS, **change}
        body = {name: value for name, value in body.items() if value is not None}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 400
        assert_openai("ErrorResponse", response.json())
        assert response.json()["error"]["param"] == param

    def test_a_tool_call_id_not_among_the_assistants_calls_is_a_400(self, client):
        messages = [
            *ASK,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "hi"},
        ]
        response = client.post("/v1/chat/completions", json={"model": GPT, "messages": messages})
        assert response.status_code == 400
        assert "call_2" in response.json()["error"]["message"]

    def test_json_object_mode_answers_the_text_as_json(self, oai):
        completion = oai.chat.completions.create(
            model=GPT, messages=ASK, response_format={"type": "json_object"}
        )
        assert json.loads(completion.choices[0].message.content) == {"answer": DEFAULT_TEXT}

    def test_json_schema_mode_answers_an_instance_whole_and_streamed(self, client):
        form = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}
        body = {"model": GPT, "messages": ASK, "response_format": form}
        whole = client.post("/v1/chat/completions", json=body).json()
        assert_openai("CreateChatCompletionResponse", whole)
        assert json.loads(whole["choices"][0]["message"]["content"]) == WEATHER_ARGS
        chunks = sse_data(client.post("/v1/chat/completions", json={**body, "stream": True}))
        pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks]
        assert len([p for p in pieces if p]) > 1
        assert json.loads("".join(pieces)) == WEATHER_ARGS

    def test_stream_error_breaks_a_streamed_tool_call_after_its_first_chunk(self, fake, client):
        fake.set_fault(mode="stream_error")
        body = {"model": GPT, "messages": ASK, "tools": OPENAI_TOOLS, "stream": True}
        chunks = sse_data(client.post("/v1/chat/completions", json=body))
        assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"].startswith("call_")
        assert chunks[-1]["error"]["message"] == "The model crashed mid-answer."

    def test_the_last_request_is_kept_with_its_headers(self, fake, oai):
        oai.chat.completions.create(model=GPT, messages=ASK, tools=OPENAI_TOOLS, seed=7)
        last = fake.last_request("/v1/chat/completions")
        assert last["body"]["seed"] == 7 and last["body"]["tools"] == OPENAI_TOOLS
        assert last["headers"]["authorization"] == f"Bearer {KEY}"


class TestAnthropicTools:
    def test_a_whole_answer_is_a_tool_use_block(self, claude):
        message = claude.messages.create(
            model=CLAUDE, max_tokens=100, messages=ASK, tools=ANTHROPIC_TOOLS
        )
        assert message.stop_reason == "tool_use"
        (block,) = message.content
        assert isinstance(block, anthropic.types.ToolUseBlock)
        assert block.id.startswith("toolu_")
        assert (block.name, block.input) == ("get_weather", WEATHER_ARGS)

    def test_tool_choice_tool_picks_the_named_tool_and_none_answers_text(self, claude):
        message = claude.messages.create(
            model=CLAUDE,
            max_tokens=100,
            messages=ASK,
            tools=ANTHROPIC_TOOLS,
            tool_choice={"type": "tool", "name": "get_time"},
        )
        assert message.content[0].name == "get_time" and message.content[0].input == {}
        message = claude.messages.create(
            model=CLAUDE,
            max_tokens=100,
            messages=ASK,
            tools=ANTHROPIC_TOOLS,
            tool_choice={"type": "none"},
        )
        assert message.content[0].text == DEFAULT_TEXT

    def test_a_stream_sends_input_json_deltas_and_ends_with_a_tool_use_block(self, client, claude):
        body = {
            "model": CLAUDE,
            "max_tokens": 100,
            "messages": ASK,
            "tools": ANTHROPIC_TOOLS,
            "stream": True,
        }
        events = sse_data(client.post("/v1/messages", json=body))
        kinds = [event["type"] for event in events]
        assert kinds[:3] == ["message_start", "content_block_start", "ping"]
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        start = events[1]["content_block"]
        assert start["type"] == "tool_use" and start["input"] == {}
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert len(deltas) > 1 and {d["type"] for d in deltas} == {"input_json_delta"}
        assert json.loads("".join(d["partial_json"] for d in deltas)) == WEATHER_ARGS
        assert events[-2]["delta"]["stop_reason"] == "tool_use"
        with claude.messages.stream(
            model=CLAUDE, max_tokens=100, messages=ASK, tools=ANTHROPIC_TOOLS
        ) as stream:
            final = stream.get_final_message()
        assert isinstance(final.content[0], anthropic.types.ToolUseBlock)
        assert final.content[0].input == WEATHER_ARGS and final.stop_reason == "tool_use"

    def test_a_tool_result_is_answered_with_text_quoting_it(self, claude):
        messages = [
            *ASK,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "22 degrees"}],
                    }
                ],
            },
        ]
        message = claude.messages.create(
            model=CLAUDE, max_tokens=100, messages=messages, tools=ANTHROPIC_TOOLS
        )
        assert message.content[0].text == "The tool said: 22 degrees"
        assert message.stop_reason == "end_turn"
        assert message.usage.input_tokens == 6 + 2

    @pytest.mark.parametrize(
        "change",
        [
            {"tools": [{"input_schema": WEATHER}]},
            {"tools": [{"name": "get_weather"}]},
            {"tool_choice": {"type": "tool", "name": "nope"}},
            {
                "messages": [
                    *ASK,
                    {"role": "assistant", "content": "hm"},
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}
                        ],
                    },
                ]
            },
        ],
    )
    def test_malformed_tools_choices_and_results_are_a_400(self, client, change):
        body = {
            "model": CLAUDE,
            "max_tokens": 100,
            "messages": ASK,
            "tools": ANTHROPIC_TOOLS,
            **change,
        }
        response = client.post("/v1/messages", json=body)
        assert response.status_code == 400
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "invalid_request_error"


class TestOllamaTools:
    def test_a_whole_answer_carries_the_tool_call_with_object_arguments(self, client):
        body = {"model": LLAMA, "messages": ASK, "tools": OPENAI_TOOLS, "stream": False}
        message = client.post("/api/chat", json=body).json()
        assert message["done_reason"] == "stop"
        assert message["message"] == {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": WEATHER_ARGS}}],
        }

    def test_a_stream_carries_the_whole_call_in_one_chunk_then_the_done_line(self, client):
        body = {"model": LLAMA, "messages": ASK, "tools": OPENAI_TOOLS}
        lines = [json.loads(x) for x in client.post("/api/chat", json=body).text.splitlines()]
        assert len(lines) == 2
        assert lines[0]["done"] is False
        assert lines[0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert lines[1]["done"] is True and "tool_calls" not in lines[1]["message"]

    def test_a_tool_result_is_answered_with_text_quoting_it(self, client):
        messages = [
            *ASK,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "get_weather", "arguments": {}}}],
            },
            {"role": "tool", "tool_name": "get_weather", "content": "11 degrees"},
        ]
        body = {"model": LLAMA, "messages": messages, "tools": OPENAI_TOOLS, "stream": False}
        answer = client.post("/api/chat", json=body).json()
        assert answer["message"]["content"] == "The tool said: 11 degrees"
        assert answer["prompt_eval_count"] == 6 + 2

    def test_format_json_and_a_schema_answer_json_text(self, client):
        body = {"model": LLAMA, "messages": ASK, "stream": False, "format": "json"}
        content = client.post("/api/chat", json=body).json()["message"]["content"]
        assert json.loads(content) == {"answer": DEFAULT_TEXT}
        lines = client.post("/api/chat", json={**body, "format": WEATHER, "stream": True})
        pieces = [json.loads(x)["message"]["content"] for x in lines.text.splitlines()]
        assert json.loads("".join(pieces)) == WEATHER_ARGS

    def test_tools_that_are_not_a_list_are_a_400_in_ollamas_shape(self, client):
        body = {"model": LLAMA, "messages": ASK, "tools": {"a": 1}, "stream": False}
        response = client.post("/api/chat", json=body)
        assert response.status_code == 400 and set(response.json()) == {"error"}


def test_plain_answers_are_unchanged_without_tools_or_format(client):
    body = {"model": GPT, "messages": ASK}
    message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": DEFAULT_TEXT, "refusal": None}


# What Claude Code and Codex offer: many tools, the one a test wants among them.
CLAUDE_CODE_TOOLS = [
    "Task", "Bash", "Glob", "Grep", "LS", "ExitPlanMode", "Read", "Edit", "MultiEdit", "Write",
    "NotebookEdit", "WebFetch", "TodoWrite", "WebSearch", "BashOutput", "KillShell",
    "SlashCommand", "AskUserQuestion", "Skill", "ListMcpResources", "ReadMcpResource",
]  # fmt: skip
READ_SCHEMA = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["file_path"],
}


def _anthropic_tool(name: str) -> dict[str, Any]:
    schema = READ_SCHEMA if name == "Read" else {"type": "object"}
    return {"name": name, "description": name, "input_schema": schema}


def _openai_tool(name: str) -> dict[str, Any]:
    schema = READ_SCHEMA if name == "Read" else {"type": "object"}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


class TestToolName:
    def test_anthropic_calls_the_named_tool_among_twenty_whatever_the_open_choice(
        self, fake, claude
    ):
        fake.set_fault(tool_name="Read")
        tools = [_anthropic_tool(name) for name in CLAUDE_CODE_TOOLS]
        for choice in (None, {"type": "auto"}, {"type": "any"}):
            extra = {"tool_choice": choice} if choice else {}
            message = claude.messages.create(
                model=CLAUDE, max_tokens=100, messages=ASK, tools=tools, **extra
            )
            (block,) = message.content
            assert (block.name, block.input) == ("Read", {"file_path": "example"})
        with claude.messages.stream(
            model=CLAUDE, max_tokens=100, messages=ASK, tools=tools
        ) as stream:
            assert stream.get_final_message().content[0].name == "Read"

    def test_a_tool_choice_forcing_another_tool_still_gets_that_tool(self, fake, claude, oai):
        fake.set_fault(tool_name="Read")
        tools = [_anthropic_tool(name) for name in CLAUDE_CODE_TOOLS]
        message = claude.messages.create(
            model=CLAUDE,
            max_tokens=100,
            messages=ASK,
            tools=tools,
            tool_choice={"type": "tool", "name": "Bash"},
        )
        assert message.content[0].name == "Bash"
        none = claude.messages.create(
            model=CLAUDE, max_tokens=100, messages=ASK, tools=tools, tool_choice={"type": "none"}
        )
        assert none.content[0].text == DEFAULT_TEXT
        forced = {"type": "function", "function": {"name": "Grep"}}
        completion = oai.chat.completions.create(
            model=GPT,
            messages=ASK,
            tools=[_openai_tool(name) for name in CLAUDE_CODE_TOOLS],
            tool_choice=forced,
        )
        assert completion.choices[0].message.tool_calls[0].function.name == "Grep"

    def test_openai_calls_the_named_tool_whole_and_streamed(self, fake, client, oai):
        fake.set_fault(tool_name="shell")
        tools = [_openai_tool(name) for name in ("apply_patch", "update_plan", "shell")]
        for choice in (None, "auto", "required"):
            extra = {"tool_choice": choice} if choice else {}
            completion = oai.chat.completions.create(model=GPT, messages=ASK, tools=tools, **extra)
            assert completion.choices[0].message.tool_calls[0].function.name == "shell"
        body = {"model": GPT, "messages": ASK, "tools": tools, "stream": True}
        chunks = sse_data(client.post("/v1/chat/completions", json=body))
        assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "shell"

    def test_openai_allowed_tools_get_the_named_tool_when_it_is_allowed(self, fake, client):
        fake.set_fault(tool_name="get_time")
        tools = [*OPENAI_TOOLS, _openai_tool("Read")]

        def called(allowed: list[str]) -> str:
            choice = {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": n}} for n in allowed],
                },
            }
            body = {"model": GPT, "messages": ASK, "tools": tools, "tool_choice": choice}
            message = client.post("/v1/chat/completions", json=body).json()
            return message["choices"][0]["message"]["tool_calls"][0]["function"]["name"]

        assert called(["Read", "get_time"]) == "get_time"
        assert called(["Read", "get_weather"]) == "Read"

    def test_ollama_calls_the_named_tool(self, fake, client):
        fake.set_fault(tool_name="Read")
        tools = [_openai_tool(name) for name in CLAUDE_CODE_TOOLS]
        body = {"model": LLAMA, "messages": ASK, "tools": tools, "stream": False}
        call = client.post("/api/chat", json=body).json()["message"]["tool_calls"][0]
        assert call["function"] == {"name": "Read", "arguments": {"file_path": "example"}}

    def test_a_name_no_tool_has_leaves_todays_rule_the_first_tool(self, fake, oai, claude):
        fake.set_fault(tool_name="Read")
        completion = oai.chat.completions.create(model=GPT, messages=ASK, tools=OPENAI_TOOLS)
        assert completion.choices[0].message.tool_calls[0].function.name == "get_weather"
        message = claude.messages.create(
            model=CLAUDE, max_tokens=100, messages=ASK, tools=ANTHROPIC_TOOLS
        )
        assert message.content[0].name == "get_weather"

    def test_tool_name_is_checked_like_the_other_fields(self, fake, client):
        response = client.post("/_control/fault", json={"tool_name": ""})
        assert (response.status_code, response.json()["field"]) == (400, "tool_name")
        assert fake.set_fault(tool_name="Read")["tool_name"] == "Read"
        assert fake.set_fault(tool_name=None)["tool_name"] is None
