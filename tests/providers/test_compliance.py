"""Answers checked against what the request required: a forced tool call that doesn't come, a
call to a tool the request never offered, JSON mode text that isn't JSON, strict `json_schema`
output off its schema. Each is `non_compliant` in the ledger and the request goes on to the next
provider, whole and streamed (a stream before its first byte is relayed); whether it counts
against the breaker is the policy's. Driven with the official SDK and langchain-openai against
the fake provider's `disobey` fault."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from devtools.fake_provider import FakeProvider
from gateway.adapters.messages import (
    Completion,
    CompletionRequest,
    OutputFormat,
    Tool,
    ToolCall,
    ToolCallDelta,
)
from gateway.routing.compliance import answer_problem, first_piece_problem
from providers.models import Provider
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows, update_policy

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANSWER_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture
def first() -> Iterator[FakeProvider]:
    with FakeProvider(models=["gpt-4o-mini"], text="Plain words from the first.") as fake:
        yield fake


@pytest.fixture
def two_openai(providers_configured, first) -> None:
    """openai-first (priority 5, the fake `first`) → openai-cloud (the suite's `secondary`);
    the Ollama primary is off, so each answer is one of the two."""
    Provider.objects.filter(name="ollama-local").update(enabled=False)
    Provider.objects.create(
        name="openai-first",
        kind="openai",
        base_url=first.url,
        model="gpt-4o-mini",
        priority=5,
        is_local=False,
        timeout_s=5,
    )


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


async def attempts_of_last(gateway) -> list[dict]:
    """The attempts of the one request a test made (a streamed one's row comes after its
    last byte, so it is waited for)."""
    return (await ledger_rows(gateway, at_least=1))[-1].attempts


async def test_a_compliant_tool_call_is_served_by_the_first_provider(
    live_url, gateway, two_openai, first, secondary
):
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=ASK, tools=[WEATHER], tool_choice=FORCED
        )
    [call] = raw.parse().choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert raw.headers["X-Failover-Provider"] == "openai-first"
    assert (first.calls, secondary.calls) == (1, 0)


async def test_a_forced_tool_call_answered_with_text_goes_to_the_next_provider(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="text")
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=ASK, tools=[WEATHER], tool_choice=FORCED
        )
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert raw.headers["X-Failover-Provider"] == "openai-cloud"
    assert (first.calls, secondary.calls) == (1, 1)
    failed, served = await attempts_of_last(gateway)
    assert (failed["provider"], failed["error_class"]) == ("openai-first", "non_compliant")
    assert "no tool call, where tool_choice required a call to 'get_weather'" in failed["detail"]
    assert served["outcome"] == "ok"
    # Not a failure on its breaker by default: a model that can't follow isn't a provider down.
    state, _ = await gateway.store.read("openai-first")
    assert state.consecutive_failures == 0


async def test_a_call_to_a_tool_never_offered_goes_to_the_next_provider(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="unknown_tool")
    async with sdk(live_url) as client:
        completion = await client.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER]
        )
    assert completion.choices[0].message.tool_calls[0].function.name == "get_weather"
    failed, _ = await attempts_of_last(gateway)
    assert failed["error_class"] == "non_compliant"
    assert "'unoffered_tool', a tool the request didn't offer" in failed["detail"]


async def test_json_mode_text_that_isnt_json_goes_to_the_next_provider(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="text")
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=ASK, response_format={"type": "json_object"}
        )
    assert json.loads(raw.parse().choices[0].message.content)
    assert raw.headers["X-Failover-Provider"] == "openai-cloud"
    failed, _ = await attempts_of_last(gateway)
    assert failed["error_class"] == "non_compliant"
    assert "not JSON" in failed["detail"]


async def test_strict_schema_output_off_its_schema_goes_to_the_next_provider(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="off_schema")
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=ASK, response_format=ANSWER_SCHEMA
        )
    assert set(json.loads(raw.parse().choices[0].message.content)) == {"answer"}
    assert raw.headers["X-Failover-Provider"] == "openai-cloud"
    failed, _ = await attempts_of_last(gateway)
    assert "misses the strict schema 'answer'" in failed["detail"]


async def test_a_schema_that_isnt_strict_takes_any_json(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="off_schema")
    loose = {"type": "json_schema", "json_schema": {**ANSWER_SCHEMA["json_schema"]}}
    loose["json_schema"]["strict"] = False
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=ASK, response_format=loose
        )
    assert json.loads(raw.parse().choices[0].message.content) == {"unexpected": True}
    assert raw.headers["X-Failover-Provider"] == "openai-first"


async def test_a_stream_that_starts_with_text_where_a_tool_was_forced_never_reaches_the_client(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="text")
    async with sdk(live_url) as client:
        stream = await client.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER], tool_choice="required", stream=True
        )
        chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == []  # nothing of the first provider's text
    calls = [
        call
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or ()
    ]
    assert calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    failed, served = await attempts_of_last(gateway)
    assert (failed["error_class"], served["provider"]) == ("non_compliant", "openai-cloud")
    assert "text, where tool_choice required a tool call" in failed["detail"]


async def test_a_stream_calling_a_tool_never_offered_is_passed_over_before_its_first_byte(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="unknown_tool")
    async with sdk(live_url) as client:
        stream = await client.chat.completions.create(
            model="auto", messages=ASK, tools=[WEATHER], stream=True
        )
        names = [
            call.function.name
            async for chunk in stream
            if chunk.choices
            for call in chunk.choices[0].delta.tool_calls or ()
            if call.function and call.function.name
        ]
    assert names == ["get_weather"]


async def test_the_policy_can_count_a_non_compliant_answer_against_the_breaker(
    live_url, gateway, two_openai, first, secondary
):
    await update_policy(gateway, non_compliant_is_failure=True, consecutive_failures=1)
    first.set_fault(disobey="text")
    async with sdk(live_url) as client:
        for _ in range(2):
            await client.chat.completions.create(
                model="auto", messages=ASK, tools=[WEATHER], tool_choice=FORCED
            )
    state, _ = await gateway.store.read("openai-first")
    assert state.state == "open"
    assert first.calls == 1  # the second request passed it over: its breaker was open
    assert secondary.calls == 2


class Weather(BaseModel):
    city: str


async def test_langchain_structured_output_survives_a_provider_that_ignores_the_tool(
    live_url, gateway, two_openai, first, secondary
):
    first.set_fault(disobey="text")
    chat = ChatOpenAI(
        model="auto", base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    )
    structured = chat.with_structured_output(Weather, method="function_calling")
    answer = await structured.ainvoke("What is the weather in Paris?")
    assert isinstance(answer, Weather)
    assert (first.calls, secondary.calls) == (1, 1)
    failed, _ = await attempts_of_last(gateway)
    assert failed["error_class"] == "non_compliant"


# The checks themselves ------------------------------------------------------------------

TOOL = Tool("get_weather", parameters=WEATHER["function"]["parameters"], strict=True)


def answer(text: str = "", *calls: ToolCall, finish: str = "stop") -> Completion:
    return Completion(text, "p", 1, 1, 1.0, finish_reason=finish, tool_calls=calls)


@pytest.mark.parametrize(
    ("request_", "completion", "problem"),
    [
        (
            CompletionRequest("q", tools=(TOOL,), tool_choice="none"),
            answer("", ToolCall("1", "get_weather", "{}")),
            "where tool_choice was none",
        ),
        (
            CompletionRequest("q", tools=(TOOL,)),
            answer("", ToolCall("1", "get_weather", "not json")),
            "are not a JSON object",
        ),
        (
            CompletionRequest("q", tools=(TOOL,)),
            answer("", ToolCall("1", "get_weather", '{"town": "Paris"}')),
            "miss the tool's schema",
        ),
        (
            CompletionRequest("q", output=OutputFormat("json_object")),
            answer("[1, 2]"),
            "not an object",
        ),
    ],
)
def test_what_a_whole_answer_fails_to_do_is_named(request_, completion, problem):
    assert problem in answer_problem(request_, completion)


@pytest.mark.parametrize(
    ("request_", "completion"),
    [
        (CompletionRequest("q", tools=(TOOL,), tool_choice="auto"), answer("Just words.")),
        (
            CompletionRequest("q", tools=(TOOL,), tool_choice="get_weather"),
            answer("", ToolCall("1", "get_weather", '{"city": "Paris"}')),
        ),
        # Cut at its token limit: the caller's max_tokens, not the model's failing.
        (
            CompletionRequest("q", output=OutputFormat("json_object")),
            answer('{"a', finish="length"),
        ),
        (CompletionRequest("q", embed=("a",)), answer("")),
    ],
)
def test_an_answer_that_does_what_was_asked_passes(request_, completion):
    assert answer_problem(request_, completion) == ""


def test_a_streams_first_piece_is_judged_only_as_far_as_it_shows():
    forced = CompletionRequest("q", tools=(TOOL,), tool_choice="required")
    assert first_piece_problem(forced, "Sure, ") != ""
    assert first_piece_problem(forced, "\n") == ""  # whitespace may precede the call
    assert first_piece_problem(forced, ToolCallDelta(0, "1", "get_weather")) == ""
    assert first_piece_problem(forced, ToolCallDelta(0, "1", "other")) != ""
    json_mode = CompletionRequest("q", output=OutputFormat("json_object"))
    assert first_piece_problem(json_mode, ' {"an') == ""
    assert first_piece_problem(json_mode, "```json") != ""
