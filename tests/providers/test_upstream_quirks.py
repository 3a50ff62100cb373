"""What real upstreams send that the fake provider doesn't, fed to the adapters byte for byte
(httpx's MockTransport stands in for the server): an answer cut at its token limit before any
text, Gemini's streamed tool calls without an index and ending with "stop", a server naming a
call on every piece; and what the adapters send for shapes the APIs refuse."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from edge.api.json_body import ApiError
from edge.api.openai.chat_request import parse_chat
from gateway.adapters.anthropic import AnthropicAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import (
    CompletionRequest,
    OutputFormat,
    Tool,
    ToolCall,
    ToolCallDelta,
    Turn,
)
from gateway.adapters.openai import OpenAICompatibleAdapter
from tests.providers.test_adapters import provider_config

pytestmark = pytest.mark.backend_free

WEATHER = Tool("get_weather", "The weather.", {"type": "object", "properties": {}})


def _openai(handler: Any) -> OpenAICompatibleAdapter:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAICompatibleAdapter(provider_config("openai", "http://upstream.test"), client)


def _answer(message: dict[str, Any], finish: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 0},
        },
    )


async def test_an_answer_cut_at_its_limit_before_any_text_is_an_answer_not_a_failure():
    adapter = _openai(lambda request: _answer({"role": "assistant", "content": ""}, "length"))
    completion = await adapter.complete(CompletionRequest(prompt="hi", max_tokens=1), timeout=5)
    assert (completion.text, completion.finish_reason) == ("", "length")


async def test_an_empty_answer_to_a_short_prompt_is_malformed_whatever_its_max_tokens():
    adapter = _openai(lambda request: _answer({"role": "assistant", "content": ""}, "stop"))
    with pytest.raises(ProviderError) as raised:
        await adapter.complete(CompletionRequest(prompt="hi", max_tokens=8000), timeout=5)
    assert raised.value.error_class == ErrorClass.MALFORMED


def _sse(*events: dict[str, Any]) -> httpx.Response:
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _drained(adapter: OpenAICompatibleAdapter, request: CompletionRequest):
    stream = await adapter.stream(request, timeout=5, first_token_timeout=5)
    pieces = [stream.first, *[piece async for piece in stream.rest()]]
    return stream, pieces


async def test_geminis_streamed_tool_calls_without_an_index_are_read_as_calls():
    def gemini(request: httpx.Request) -> httpx.Response:
        call = {"type": "function", "function": {"name": "get_weather", "arguments": '{"a":1}'}}
        return _sse(
            _chunk({"role": "assistant", "tool_calls": [{"id": "c1", **call}]}),
            _chunk({"tool_calls": [{"id": "c2", **call}]}),
            _chunk({}, "stop"),
        )

    stream, _ = await _drained(_openai(gemini), CompletionRequest(prompt="hi", tools=(WEATHER,)))
    assert stream.tool_calls == (
        ToolCall("c1", "get_weather", '{"a":1}'),
        ToolCall("c2", "get_weather", '{"a":1}'),
    )
    assert stream.finish_reason == "tool_calls"


async def test_a_call_named_on_every_piece_is_named_once_downstream():
    def repeats(request: httpx.Request) -> httpx.Response:
        def piece(arguments: str) -> dict[str, Any]:
            function = {"name": "get_weather", "arguments": arguments}
            return _chunk({"tool_calls": [{"index": 0, "id": "c1", "function": function}]})

        return _sse(piece('{"a":'), piece("1}"), _chunk({}, "tool_calls"))

    stream, pieces = await _drained(_openai(repeats), CompletionRequest(prompt="hi"))
    assert pieces == [
        ToolCallDelta(0, "c1", "get_weather", '{"a":'),
        ToolCallDelta(0, arguments="1}"),
    ]
    assert stream.tool_calls == (ToolCall("c1", "get_weather", '{"a":1}'),)


def _anthropic() -> AnthropicAdapter:
    config = provider_config("anthropic", "http://upstream.test")
    return AnthropicAdapter(config, httpx.AsyncClient())


def test_two_user_turns_in_a_row_become_one_anthropic_message():
    request = CompletionRequest(
        prompt="and now?",
        turns=(Turn("user", "first"), Turn("user", "and now?")),
        tools=(WEATHER,),
    )
    messages = _anthropic().payload(request)["messages"]
    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "and now?"}],
        }
    ]


def test_no_parallel_switch_rides_on_a_tool_choice_of_none():
    request = CompletionRequest(
        prompt="hi", tools=(WEATHER,), tool_choice="none", options=(("parallel_tool_calls", False),)
    )
    assert _anthropic().payload(request)["tool_choice"] == {"type": "none"}
    allowed = CompletionRequest(prompt="hi", tools=(WEATHER,), options=request.options)
    assert _anthropic().payload(allowed)["tool_choice"] == {
        "type": "auto",
        "disable_parallel_tool_use": True,
    }


def test_parallel_tool_calls_goes_to_openai_only_beside_tools():
    adapter = _openai(lambda request: httpx.Response(500))
    options = (("parallel_tool_calls", False),)
    assert "parallel_tool_calls" not in adapter.payload(CompletionRequest("hi", options=options))
    offered = adapter.payload(CompletionRequest("hi", tools=(WEATHER,), options=options))
    assert offered["parallel_tool_calls"] is False


def test_anthropic_is_passed_over_for_json_beside_tools_of_the_requests_own():
    both = CompletionRequest("hi", tools=(WEATHER,), output=OutputFormat("json_object"))
    parameter, _ = _anthropic().cannot(both) or ("", "")
    assert parameter == "response_format"
    assert _anthropic().cannot(CompletionRequest("hi", output=OutputFormat("json_object"))) is None


CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "user", "content": "well?"},
            ],
            "messages[2]",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "user", "content": "and tomorrow?"},
                {"role": "tool", "tool_call_id": "c1", "content": "rain"},
            ],
            "messages[4].tool_call_id",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [CALL, {**CALL, "id": "c2"}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            "messages",
        ),
    ],
    ids=["text-before-the-results", "a-result-out-of-its-place", "a-call-left-unanswered"],
)
def test_tool_results_must_follow_their_calls_as_openai_requires(messages, field):
    parsed = parse_chat(json.dumps({"model": "auto", "messages": messages}).encode())
    assert isinstance(parsed, ApiError) and parsed.field == field
