"""A forced tool call on Ollama, which has no `tool_choice`: asked for through `format` (the
tool's parameters schema, no `tools`), and its JSON answer given back as one call to that tool,
whole and streamed; against the fake provider in Ollama's dialect, then through the gateway with
the `openai` SDK and langchain-openai."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from devtools.fake_provider import FakeProvider
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import (
    CompletionRequest,
    OutputFormat,
    Tool,
    ToolCall,
    ToolCallDelta,
    Turn,
)
from gateway.adapters.ollama import OllamaAdapter
from gateway.adapters.pool import make_client
from gateway.adapters.tools import EMPTY_OBJECT, forced_by_format
from runtime.gateway import settings_for_clients
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows
from tests.providers.test_adapters import provider_config
from tests.spec import assert_openai, sse_events

LLAMA, QWEN = "llama3.1:8b", "qwen3:8b"  # QWEN alone takes `tools` on the fake
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
WEATHER = Tool("get_weather", "The weather in a city now.", PARAMETERS)
CLOCK = Tool("get_time")  # takes no parameters
# The fake's instance of PARAMETERS, as the adapter gives it back: compact JSON.
ARGUMENTS = '{"city":"example","unit":"c"}'
CALL_ID = re.compile(r"call_[0-9a-f]{24}")  # the ids the adapter makes for Ollama's calls

backend_free = pytest.mark.backend_free


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=[LLAMA, QWEN], tool_models=[QWEN]) as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., OllamaAdapter]]:
    made: list[OllamaAdapter] = []

    def make(url: str, **overrides: Any) -> OllamaAdapter:
        config = provider_config("ollama", url, **overrides)
        adapter = OllamaAdapter(config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


def forced(choice: str = "get_weather", **fields: Any) -> CompletionRequest:
    values: dict[str, Any] = {"tools": (WEATHER, CLOCK), "tool_choice": choice, **fields}
    return CompletionRequest(prompt="What is the weather in Paris?", **values)


def chat_body(fake: FakeProvider) -> dict[str, Any]:
    last = fake.last_request("/api/chat")
    assert last is not None, "nothing was sent to /api/chat"
    body: dict[str, Any] = last["body"]
    return body


@backend_free
@pytest.mark.parametrize(
    ("tools", "choice", "held"),
    [
        ((WEATHER, CLOCK), "get_weather", "get_weather"),
        ((WEATHER,), "required", "get_weather"),
        ((WEATHER, CLOCK), "required", ""),
        ((WEATHER,), "auto", ""),
        ((WEATHER,), "none", ""),
        ((WEATHER,), "", ""),
        ((WEATHER,), "get_time", ""),  # a name among no tool offered
        ((), "required", ""),
    ],
)
def test_forced_by_format_names_the_one_tool_a_request_forces(tools, choice, held):
    request = CompletionRequest(prompt="hi", tools=tools, tool_choice=choice)
    assert forced_by_format(request) == held


@backend_free
class TestWhatOllamaIsAsked:
    async def test_a_named_tool_goes_as_format_with_its_schema_and_no_tools(
        self, fake, make_adapter
    ):
        await make_adapter(fake.url, model=QWEN).complete(forced(), timeout=5)

        body = chat_body(fake)
        assert body["format"] == PARAMETERS
        assert "tools" not in body and "tool_choice" not in body
        system = body["messages"][0]
        assert system["role"] == "system" and "get_weather" in system["content"]
        assert json.dumps(PARAMETERS) in system["content"]  # the schema in words, beside format
        assert body["messages"][1:] == [
            {"role": "user", "content": "What is the weather in Paris?"}
        ]

    async def test_the_instruction_joins_the_requests_own_system_prompt(self, fake, make_adapter):
        request = forced(system_prompt="You are a weather desk.")

        await make_adapter(fake.url).complete(request, timeout=5)

        [system] = [m for m in chat_body(fake)["messages"] if m["role"] == "system"]
        assert system["content"].startswith("You are a weather desk.\n\n")
        assert "get_weather" in system["content"]

    async def test_a_tool_without_parameters_is_held_to_an_empty_object(self, fake, make_adapter):
        completion = await make_adapter(fake.url).complete(forced("get_time"), timeout=5)

        assert chat_body(fake)["format"] == EMPTY_OBJECT == {"type": "object", "properties": {}}
        [call] = completion.tool_calls
        assert (call.name, call.arguments) == ("get_time", "{}")

    async def test_the_tool_wins_over_a_response_format(self, fake, make_adapter):
        other = {"type": "object", "properties": {"answer": {"type": "string"}}}
        request = forced(output=OutputFormat("json_schema", name="reply", schema=other))

        completion = await make_adapter(fake.url).complete(request, timeout=5)

        assert chat_body(fake)["format"] == PARAMETERS
        assert completion.tool_calls[0].name == "get_weather"

    async def test_after_a_tool_result_the_next_forced_call_is_held_too(self, fake, make_adapter):
        earlier = ToolCall("call_1", "get_time", "{}")
        turns = (
            Turn("user", "What time is it, and the weather?"),
            Turn("assistant", tool_calls=(earlier,)),
            Turn("tool", "12:00", tool_call_id="call_1", name="get_time"),
        )

        completion = await make_adapter(fake.url).complete(forced(turns=turns), timeout=5)

        sent = chat_body(fake)["messages"]
        assert sent[-1] == {"role": "tool", "tool_name": "get_time", "content": "12:00"}
        assert [(c.name, c.arguments) for c in completion.tool_calls] == [
            ("get_weather", ARGUMENTS)
        ]


@backend_free
class TestTheAnswer:
    @pytest.mark.parametrize("choice", ["get_weather", "required"])
    async def test_the_json_answer_is_one_call_to_the_tool_whole(self, fake, make_adapter, choice):
        tools = (WEATHER,) if choice == "required" else (WEATHER, CLOCK)

        completion = await make_adapter(fake.url, model=LLAMA).complete(
            forced(choice, tools=tools), timeout=5
        )

        assert (completion.text, completion.finish_reason) == ("", "tool_calls")
        [call] = completion.tool_calls
        assert CALL_ID.fullmatch(call.id)
        # The fake answers '{"city": "example", "unit": "c"}': re-serialised compactly.
        assert (call.name, call.arguments) == ("get_weather", ARGUMENTS)

    async def test_configured_tool_arguments_are_the_answer_when_they_fit_the_schema(
        self, fake, make_adapter
    ):
        fake.set_fault(tool_arguments={"city": "Paris", "unit": "f"})

        completion = await make_adapter(fake.url).complete(forced(), timeout=5)

        assert completion.tool_calls[0].arguments == '{"city":"Paris","unit":"f"}'

    async def test_streamed_the_first_piece_names_the_call_and_the_rest_are_its_arguments(
        self, fake, make_adapter
    ):
        adapter = make_adapter(fake.url)

        stream = await adapter.stream(forced(), timeout=5, first_token_timeout=5)
        rest = [piece async for piece in stream.rest()]

        assert chat_body(fake)["stream"] is True and chat_body(fake)["format"] == PARAMETERS
        first = stream.first
        assert isinstance(first, ToolCallDelta)
        assert (first.index, first.name, first.arguments) == (0, "get_weather", "")
        assert CALL_ID.fullmatch(first.id)
        assert len(rest) > 1 and all(isinstance(piece, ToolCallDelta) for piece in rest)
        assert all((p.index, p.id, p.name) == (0, "", "") for p in rest)  # type: ignore[union-attr]
        arguments = "".join(piece.arguments for piece in rest)  # type: ignore[union-attr]
        assert json.loads(arguments) == {"city": "example", "unit": "c"}
        completion = stream.completion(latency_ms=1.0)
        assert (completion.text, completion.finish_reason) == ("", "tool_calls")
        assert [(c.id, c.name) for c in completion.tool_calls] == [(first.id, "get_weather")]

    async def test_an_answer_that_is_no_json_object_is_non_compliant_whole_and_streamed(
        self, fake, make_adapter
    ):
        fake.set_fault(disobey="text")  # plain text, whatever format asked
        adapter = make_adapter(fake.url)

        with pytest.raises(ProviderError) as whole:
            await adapter.complete(forced(), timeout=5)
        with pytest.raises(ProviderError) as streamed:
            await adapter.stream(forced(), timeout=5, first_token_timeout=5)

        for caught in (whole.value, streamed.value):
            assert caught.error_class == ErrorClass.NON_COMPLIANT
            assert "get_weather" in caught.message

    async def test_a_streamed_answer_that_ends_as_no_json_object_is_malformed(self, make_adapter):
        adapter = make_adapter("http://127.0.0.1:1")
        stream = adapter.stream_over(forced(), httpx.Response(200), 5.0, 0.0)

        first = stream.decoder.decode({"message": {"content": ' {"city": '}, "done": False}, stream)
        assert isinstance(first, ToolCallDelta) and first.name == "get_weather"
        stream.calls[0] = [first.id, first.name, '{"city": ']  # what the stream has noted

        with pytest.raises(ProviderError) as caught:
            stream.decoder.decode({"message": {"content": ""}, "done": True}, stream)
        assert caught.value.error_class == ErrorClass.MALFORMED

    async def test_a_stream_cut_at_its_token_limit_keeps_the_arguments_so_far(self, make_adapter):
        adapter = make_adapter("http://127.0.0.1:1")
        stream = adapter.stream_over(forced(), httpx.Response(200), 5.0, 0.0)
        stream.calls[0] = ["call_1", "get_weather", '{"city": "Par']

        end = {"message": {"content": "is"}, "done": True, "done_reason": "length"}
        piece = stream.decoder.decode(end, stream)

        assert piece == ToolCallDelta(0, arguments="is")
        assert stream.finish_reason == "length"


@backend_free
class TestWhatOllamaRefuses:
    def test_required_among_several_tools_is_refused_saying_why(self, make_adapter):
        adapter = make_adapter("http://127.0.0.1:1")

        refusal = adapter.cannot(forced("required"))

        assert refusal is not None and refusal[0] == "tool_choice"
        assert "2 tools to choose from" in refusal[1]

    def test_a_name_among_no_tool_offered_is_refused_saying_so(self, make_adapter):
        refusal = make_adapter("http://127.0.0.1:1").cannot(forced("get_news"))

        assert refusal is not None and "get_news is not among the tools" in refusal[1]

    def test_a_forced_call_needs_a_row_that_can_give_json(self, make_adapter):
        assert make_adapter("http://127.0.0.1:1").cannot(forced()) is None
        refusal = make_adapter("http://127.0.0.1:1", json_output=False).cannot(forced())
        assert refusal is not None and refusal[0] == "tool_choice"
        assert "can't give JSON output" in refusal[1]


# Through the gateway ----------------------------------------------------------------------

URL = "/v1/chat/completions"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER.description,
        "parameters": PARAMETERS,
    },
}
# The SDK's stream helper takes only strict tools (it parses their arguments as they come).
STRICT_WEATHER = {
    "type": "function",
    "function": {
        **WEATHER_TOOL["function"],
        "strict": True,
        "parameters": {**PARAMETERS, "additionalProperties": False},
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


async def _chat(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post(URL, json={"model": "auto", "messages": ASK, **body})


async def _served_by_ollama(gateway: Any, primary: FakeProvider) -> None:
    [record] = await ledger_rows(gateway)
    assert (record.final_provider, record.outcome) == ("ollama-local", "ok")
    # The ledger says how the call was asked for: Ollama has no tool_choice.
    assert record.attempts[0]["detail"] == "tool call to get_weather held by format"
    body = chat_body(primary)
    assert body["format"] == PARAMETERS and "tools" not in body


@pytest.mark.django_db(transaction=True)
class TestThroughTheGateway:
    @pytest.mark.parametrize(
        ("tools", "choice"),
        [([WEATHER_TOOL, TIME_TOOL], NAMED), ([WEATHER_TOOL], "required")],
        ids=["named", "required-with-one-tool"],
    )
    async def test_the_ollama_primary_answers_a_forced_call_in_openais_shape(
        self, api, gateway, primary, secondary, tools, choice
    ):
        response = await _chat(api, tools=tools, tool_choice=choice)

        assert response.status_code == 200, response.text
        assert response.headers["x-failover-provider"] == "ollama-local"
        assert response.headers["x-failover-tier"] == "primary"
        body = response.json()
        assert_openai("CreateChatCompletionResponse", body)
        [choice_made] = body["choices"]
        assert choice_made["finish_reason"] == "tool_calls"
        [call] = choice_made["message"]["tool_calls"]
        assert (call["function"]["name"], call["function"]["arguments"]) == (
            "get_weather",
            ARGUMENTS,
        )
        assert secondary.calls == 0
        await _served_by_ollama(gateway, primary)

    @pytest.mark.parametrize(
        ("tools", "choice"),
        [([WEATHER_TOOL, TIME_TOOL], NAMED), ([WEATHER_TOOL], "required")],
        ids=["named", "required-with-one-tool"],
    )
    async def test_streamed_the_forced_call_arrives_as_openais_deltas(
        self, api, gateway, primary, secondary, tools, choice
    ):
        response = await _chat(api, tools=tools, tool_choice=choice, stream=True)

        assert response.status_code == 200, response.text
        assert response.headers["x-failover-provider"] == "ollama-local"
        events = sse_events(response.text)
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        for chunk in chunks:
            assert_openai("CreateChatCompletionStreamResponse", chunk)
        pieces = [
            call
            for chunk in chunks
            for made in chunk["choices"]
            for call in made["delta"].get("tool_calls", [])
        ]
        assert CALL_ID.fullmatch(pieces[0]["id"]) and pieces[0]["function"]["name"] == "get_weather"
        assert {piece["index"] for piece in pieces} == {0}
        arguments = "".join(piece["function"].get("arguments", "") for piece in pieces)
        assert json.loads(arguments) == {"city": "example", "unit": "c"}
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert secondary.calls == 0
        await _served_by_ollama(gateway, primary)

    async def test_the_sdk_parses_the_forced_call_whole_and_streamed(
        self, live_url, gateway, primary, secondary
    ):
        async with sdk(live_url) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="auto", messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=NAMED
            )
            async with client.chat.completions.stream(
                model="auto", messages=ASK, tools=[STRICT_WEATHER], tool_choice="required"
            ) as stream:
                final = await stream.get_final_completion()
        [parsed] = final.choices[0].message.tool_calls or []
        assert parsed.function.parsed_arguments == {"city": "example", "unit": "c"}

        assert (raw.headers["x-failover-provider"], raw.headers["x-failover-tier"]) == (
            "ollama-local",
            "primary",
        )
        whole = raw.parse()
        for completion in (whole, final):
            assert completion.model == "ollama-local"
            assert completion.choices[0].finish_reason == "tool_calls"
            [call] = completion.choices[0].message.tool_calls or []
            assert call.function.name == "get_weather"
            assert json.loads(call.function.arguments) == {"city": "example", "unit": "c"}
        assert (primary.calls, secondary.calls) == (2, 0)

    async def test_required_among_several_tools_still_passes_ollama_over(
        self, api, gateway, primary, secondary
    ):
        tools = [WEATHER_TOOL, TIME_TOOL]

        response = await _chat(api, tools=tools, tool_choice="required")

        assert response.headers["x-failover-provider"] == "openai-cloud"
        assert secondary.last_request(URL)["body"]["tool_choice"] == "required"
        [record] = await ledger_rows(gateway)
        assert record.attempts[0]["provider"] == "ollama-local"
        assert record.attempts[0]["error_class"] == "cannot_serve"
        assert record.attempts[0]["detail"].startswith("tool_choice: Ollama has no tool_choice")
        assert primary.calls == 0


class Weather(BaseModel):
    city: str
    unit: str


@pytest.mark.django_db(transaction=True)
async def test_langchains_function_calling_structured_output_is_served_by_ollama(
    live_url, gateway, primary, secondary
):
    from langchain_openai import ChatOpenAI  # a heavy import, for this one test

    primary.set_fault(tool_arguments={"city": "Paris", "unit": "c"})
    model = ChatOpenAI(
        model="auto", base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    )

    weather = await model.with_structured_output(Weather, method="function_calling").ainvoke(
        "Weather in Paris?"
    )

    assert weather == Weather(city="Paris", unit="c")
    body = chat_body(primary)
    assert body["format"]["required"] == ["city", "unit"] and "tools" not in body
    assert "Weather" in body["messages"][0]["content"]  # the tool LangChain forced, by name
    [record] = await ledger_rows(gateway)
    assert (record.final_provider, record.tier) == ("ollama-local", "primary")
    assert secondary.calls == 0
