"""Thinking carried across dialects: a request's thinking (Anthropic's `thinking` and
`output_config.effort`, OpenAI's `reasoning_effort`, the Responses API's `reasoning`) asked of
each provider whose model thinks in its own words, what the model thought given back in the
caller's shape (thinking blocks, reasoning items, `reasoning_content`), whole and streamed, and
earlier thinking given back only to the provider kind that wrote it. What a provider can't take
is dropped and named (`X-Failover-Dropped`, the ledger's attempt). Driven with the official
SDKs against the fake provider in each dialect."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message
from asgiref.sync import sync_to_async
from pydantic import TypeAdapter

from devtools.fake_provider.thinking import THINKING_TEXT, sign
from providers.models import Provider
from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import CLAUDE_KEY, ledger_rows
from tests.providers.test_anthropic_front_door import events
from tests.providers.test_responses_api import checked_events
from tests.spec import assert_openai

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = TypeAdapter(Message)
HELLO = [{"role": "user", "content": "Say hello."}]
ADAPTIVE = {"type": "adaptive"}
READ = {
    "name": "Read",
    "description": "Read a file.",
    "input_schema": {
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
    },
}
OWN_OLLAMA = "failover-thinking:ollama"


def claude_sdk(live_url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=live_url, api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


async def thinks(name: str, on: bool = True) -> None:
    await sync_to_async(Provider.objects.filter(name=name).update)(supports_thinking=on)


@pytest.fixture
async def ollama_thinks(gateway, primary):
    """The primary's model thinks (the fake's and the provider's settings both)."""
    primary.set_fault(thinking_models=["llama3.1:8b"])
    await thinks("ollama-local")
    await gateway.snapshots.refresh()
    return primary


@pytest.fixture
def claude_too(providers_configured, claude, monkeypatch) -> Provider:
    """Claude beside the cascade, asked by name: its model thinks."""
    monkeypatch.setenv("FAILOVER_SECRET_TEST_ANTHROPIC_KEY", CLAUDE_KEY)
    return Provider.objects.create(
        name="claude", kind="anthropic", base_url=claude.url, model="claude-haiku-4-5",
        api_key_env="FAILOVER_SECRET_TEST_ANTHROPIC_KEY", priority=30, timeout_s=5,
        supports_thinking=True,
    )  # fmt: skip


@pytest.fixture
async def claude_thinks(gateway, anthropic_only, claude):
    await thinks("anthropic-cloud")
    await gateway.snapshots.refresh()
    return claude


def after_a_call(thought: dict[str, Any]) -> list[dict[str, Any]]:
    """A conversation whose assistant turn thought, then called Read; its result last."""
    return [
        {"role": "user", "content": "What does notes.txt say?"},
        {
            "role": "assistant",
            "content": [
                thought,
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "n"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "pelican"}],
        },
    ]


# Anthropic's door ---------------------------------------------------------------------------


async def test_an_ollama_models_thinking_comes_back_as_a_thinking_block(
    live_url, ollama_thinks, secondary
):
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=2000, messages=HELLO, thinking=ADAPTIVE
        )
    message = MESSAGE.validate_json(raw.content)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == THINKING_TEXT
    assert message.content[0].signature == OWN_OLLAMA
    assert ollama_thinks.last_request("/api/chat")["body"]["think"] is True
    assert "X-Failover-Dropped" not in raw.headers


async def test_an_ollama_models_thinking_streams_as_thinking_deltas_then_its_signature(
    live_url, ollama_thinks, secondary
):
    status, sent = await events(
        live_url,
        {"model": "auto", "max_tokens": 2000, "messages": HELLO, "stream": True,
         "thinking": ADAPTIVE},
    )  # fmt: skip
    assert status == 200
    starts = [data["content_block"]["type"] for kind, data in sent if kind == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [data["delta"] for kind, data in sent if kind == "content_block_delta"]
    thought = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
    assert thought == THINKING_TEXT
    [signature] = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
    assert signature == OWN_OLLAMA
    # The SDK's own accumulation agrees.
    async with (
        claude_sdk(live_url) as client,
        client.messages.stream(
            model="auto", max_tokens=2000, messages=HELLO, thinking=ADAPTIVE
        ) as stream,
    ):
        final = await stream.get_final_message()
    assert (final.content[0].type, final.content[0].thinking) == ("thinking", THINKING_TEXT)


async def test_claudes_thinking_comes_back_signed_by_anthropic_whole_and_streamed(
    live_url, claude_thinks
):
    body = {"model": "auto", "max_tokens": 4000, "messages": HELLO,
            "thinking": {"type": "enabled", "budget_tokens": 2048}}  # fmt: skip
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(**body)
    assert message.content[0].type == "thinking"
    assert message.content[0].signature == sign(THINKING_TEXT, claude_thinks.config.signature_key)
    sent = claude_thinks.last_request("/v1/messages")["body"]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    status, streamed = await events(live_url, {**body, "stream": True})
    deltas = [data["delta"] for kind, data in streamed if kind == "content_block_delta"]
    [signature] = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
    assert signature == message.content[0].signature


async def test_claudes_thinking_goes_back_to_claude_and_an_effort_becomes_a_budget(
    live_url, claude_thinks
):
    signature = sign(THINKING_TEXT, claude_thinks.config.signature_key)
    thought = {"type": "thinking", "thinking": THINKING_TEXT, "signature": signature}
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto",
            max_tokens=3000,
            messages=after_a_call(thought),
            tools=[READ],
            thinking={"type": "enabled", "budget_tokens": 1024},
            extra_body={"output_config": {"effort": "high"}},
        )
    assert message.content[-1].text == "The tool said: pelican"
    [received] = claude_thinks.thinking_received("/v1/messages")
    assert (received.text, received.signed_here) == (THINKING_TEXT, True)
    assert claude_thinks.last_request("/v1/messages")["body"]["output_config"] == {"effort": "high"}


async def test_thinking_ollama_wrote_goes_back_to_ollama_and_never_to_claude(
    claude_too, live_url, gateway, ollama_thinks, claude
):
    thought = {"type": "thinking", "thinking": "I should read it.", "signature": OWN_OLLAMA}
    async with claude_sdk(live_url) as client:
        await client.messages.create(
            model="auto", max_tokens=2000, messages=after_a_call(thought), tools=[READ],
            thinking=ADAPTIVE,
        )  # fmt: skip
    [received] = ollama_thinks.thinking_received("/api/chat")
    assert received.text == "I should read it."
    # The same conversation with Claude serving: the thought is Ollama's, so it is left out
    # (a real Anthropic refuses a signature it didn't make).
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="claude", max_tokens=2000, messages=after_a_call(thought), tools=[READ],
            thinking=ADAPTIVE,
        )  # fmt: skip
    assert raw.parse().content[-1].text == "The tool said: pelican"
    assert claude.thinking_received("/v1/messages") == ()
    # Anthropic wants a tool-using turn's thinking back with thinking on: with none of its own
    # to give, the request asks for no thinking, and says so.
    assert "thinking" not in claude.last_request("/v1/messages")["body"]
    assert raw.headers["X-Failover-Provider"] == "claude"
    assert set(raw.headers["X-Failover-Dropped"].split(",")) == {"thinking", "thinking history"}


async def test_a_provider_whose_model_doesnt_think_serves_without_it_and_says_so(
    live_url, gateway, primary, secondary
):
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=2000, messages=HELLO, thinking=ADAPTIVE,
            extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
                        "top_k": 5},
            extra_headers={"anthropic-beta": "context-management-2025-06-27"},
        )  # fmt: skip
    assert [block.type for block in raw.parse().content] == ["text"]
    assert primary.last_request("/api/chat")["body"]["think"] is False
    assert primary.last_request("/api/chat")["body"]["options"]["top_k"] == 5
    dropped = "context_management,anthropic_beta,thinking"
    assert raw.headers["X-Failover-Dropped"] == dropped
    [record] = await ledger_rows(gateway, at_least=1)
    assert record.attempts[0]["dropped"] == dropped.split(",")


async def test_anthropics_own_settings_and_betas_reach_an_anthropic_provider(
    live_url, claude_thinks
):
    betas = "context-management-2025-06-27,effort-2025-11-24"
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=4000, messages=HELLO, thinking=ADAPTIVE, top_k=5,
            extra_body={"context_management": edits},
            extra_headers={"anthropic-beta": betas},
        )  # fmt: skip
    sent = claude_thinks.last_request("/v1/messages")["body"]
    assert sent["context_management"] == edits
    assert sent["thinking"] == ADAPTIVE
    assert "top_k" not in sent  # Anthropic takes no top_k beside thinking
    assert raw.headers["X-Failover-Dropped"] == "top_k"
    headers = claude_thinks.last_request("/v1/messages")["headers"]
    assert headers["anthropic-beta"] == betas


async def test_system_messages_in_the_conversation_join_the_system_prompt_for_claude(
    live_url, claude_thinks
):
    messages = [
        {"role": "user", "content": "Say hello."},
        {"role": "system", "content": [{"type": "text", "text": "Tools changed."}]},
    ]
    async with claude_sdk(live_url) as client:
        await client.messages.create(
            model="auto", max_tokens=100, system="Be brief.", messages=messages
        )
    sent = claude_thinks.last_request("/v1/messages")["body"]
    assert sent["system"] == "Be brief.\n\nTools changed."
    assert [m["role"] for m in sent["messages"]] == ["user"]


async def test_system_messages_in_the_conversation_keep_their_place_for_ollama(
    live_url, primary, secondary
):
    messages = [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Now in French."},
        {"role": "user", "content": "Again."},
    ]
    async with claude_sdk(live_url) as client:
        await client.messages.create(model="auto", max_tokens=100, messages=messages)
    sent = primary.last_request("/api/chat")["body"]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "Say hello."),
        ("assistant", "Hello."),
        ("system", "Now in French."),
        ("user", "Again."),
    ]


async def test_a_problem_is_named_by_its_path_as_anthropic_names_it(live_url, primary):
    status, sent = await events(
        live_url,
        {"model": "auto", "max_tokens": 10,
         "messages": [*HELLO, {"role": "assistant", "content": "x"}, {"role": "tool",
                                                                      "content": "y"}]},
    )  # fmt: skip
    assert status == 400
    assert sent[0][1]["error"]["message"].startswith("messages.2.role: ")


async def test_a_tool_call_id_on_the_anthropic_door_looks_like_anthropics(
    live_url, primary, secondary
):
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=100, messages=HELLO, tools=[READ]
        )
    [call] = [block for block in message.content if block.type == "tool_use"]
    assert call.id.startswith("toolu_")


# OpenAI's doors -----------------------------------------------------------------------------


async def test_a_responses_request_with_reasoning_gets_a_reasoning_item_whole_and_streamed(
    live_url, ollama_thinks, secondary
):
    body = {"model": "auto", "input": "Say hello.", "reasoning": {"summary": "auto"},
            "include": ["reasoning.encrypted_content"]}  # fmt: skip
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as http:
        whole = (await http.post(live_url + "/v1/responses", json=body)).json()
        streamed = await http.post(live_url + "/v1/responses", json={**body, "stream": True})
    assert_openai("Response", whole)
    reasoning, message = whole["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["summary"] == [{"type": "summary_text", "text": THINKING_TEXT}]
    assert "encrypted_content" not in reasoning  # OpenAI's own; no chat provider gives it
    events_ = checked_events(streamed.text)
    deltas = [e["delta"] for e in events_ if e["type"] == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == THINKING_TEXT
    done = events_[-1]["response"]["output"]
    assert [item["type"] for item in done] == ["reasoning", "message"]
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    ) as client:
        response = await client.responses.create(
            model="auto", input="Say hello.", reasoning={"effort": "high", "summary": "auto"}
        )
    assert response.output[0].type == "reasoning"
    assert response.output[0].summary[0].text == THINKING_TEXT


async def test_a_replayed_reasoning_item_is_taken_and_named_as_dropped(
    live_url, primary, secondary
):
    items = [
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}],
         "encrypted_content": "gAAAA"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                               "text": "Hello."}]},
        {"role": "user", "content": "Again."},
    ]  # fmt: skip
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as http:
        response = await http.post(
            live_url + "/v1/responses",
            json={"model": "auto", "input": items, "tools": [{"type": "web_search"}]},
        )
    assert response.status_code == 200, response.text
    # Ollama has no place for OpenAI's built-in tools nor for OpenAI's reasoning.
    assert response.headers["X-Failover-Dropped"] == "tools.web_search,thinking history"
    sent = primary.last_request("/api/chat")["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


async def test_codex_shaped_tools_a_namespace_flattened_and_a_hosted_one_dropped(
    live_url, primary, secondary
):
    exec_command = {
        "type": "function",
        "name": "exec_command",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    }
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    body = {
        "model": "auto", "input": "List the files.", "stream": True, "store": False,
        "tools": [exec_command, {"type": "namespace", "name": "multi_agent_v1",
                                 "description": "Agents.", "tools": [spawn]},
                  {"type": "web_search", "external_web_access": False}],
        "tool_choice": "auto", "parallel_tool_calls": True, "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "session-1",
        "client_metadata": {"x-codex-turn-metadata": "{}"},
    }  # fmt: skip
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as http:
        response = await http.post(live_url + "/v1/responses", json=body)
    assert response.status_code == 200, response.text
    done = checked_events(response.text)[-1]["response"]
    assert [item["type"] for item in done["output"]] == ["function_call"]
    assert done["output"][0]["name"] == "exec_command"
    sent = primary.last_request("/api/chat")["body"]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["exec_command", "spawn_agent"]
    dropped = response.headers["X-Failover-Dropped"].split(",")
    assert set(dropped) == {
        "parallel_tool_calls",
        "prompt_cache_key",
        "client_metadata",
        "tools.web_search",
        "thinking",  # its model doesn't think
    }


async def test_a_chat_request_with_reasoning_effort_gets_the_reasoning_content(
    live_url, gateway, ollama_thinks, secondary
):
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    ) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=HELLO, reasoning_effort="low"
        )
    body = json.loads(raw.content)
    assert body["choices"][0]["message"]["reasoning_content"] == THINKING_TEXT
    assert ollama_thinks.last_request("/api/chat")["body"]["think"] is True


async def test_an_openai_reasoning_model_is_asked_its_effort_and_its_thinking_read(
    live_url, gateway, primary, secondary
):
    secondary.set_fault(thinking_models=["gpt-4o-mini"])
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(enabled=False)
    await thinks("openai-cloud")
    await gateway.snapshots.refresh()
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=2000, messages=HELLO,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )  # fmt: skip
    assert secondary.last_request("/v1/chat/completions")["body"]["reasoning_effort"] == "minimal"
    assert message.content[0].type == "thinking"
    assert message.content[0].signature == "failover-thinking:openai"


WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


async def test_anthropics_own_tools_go_to_claude_as_they_came_and_are_dropped_elsewhere(
    claude_too, live_url, primary, secondary, claude
):
    body = {"model": "auto", "max_tokens": 500, "messages": HELLO, "tools": [READ, WEB_SEARCH]}
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(**body)
        assert raw.headers["X-Failover-Dropped"] == "tools.web_search_20250305"
        assert [
            t["function"]["name"] for t in primary.last_request("/api/chat")["body"]["tools"]
        ] == ["Read"]
        raw = await client.messages.with_raw_response.create(**{**body, "model": "claude"})
    assert raw.headers["X-Failover-Provider"] == "claude"
    assert "X-Failover-Dropped" not in raw.headers
    assert claude.last_request("/v1/messages")["body"]["tools"][1] == WEB_SEARCH


APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /(.|\\n)+/"},
}
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"


async def test_a_custom_tools_call_comes_back_as_a_custom_tool_call_whole_and_streamed(
    live_url, primary, secondary
):
    primary.set_fault(tool_name="apply_patch", tool_arguments={"input": PATCH})
    body = {"model": "auto", "input": "Add a.txt.", "tools": [APPLY_PATCH]}
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as http:
        whole = (await http.post(live_url + "/v1/responses", json=body)).json()
        streamed = await http.post(live_url + "/v1/responses", json={**body, "stream": True})
    assert_openai("Response", whole)
    [call] = whole["output"]
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", PATCH)
    sent = primary.last_request("/api/chat")["body"]["tools"][0]["function"]
    assert sent["parameters"]["required"] == ["input"]
    assert "lark grammar" in sent["parameters"]["properties"]["input"]["description"]
    events_ = checked_events(streamed.text)
    [done] = [e for e in events_ if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == PATCH
    assert events_[-1]["response"]["output"][0]["input"] == PATCH


async def test_a_custom_tools_call_and_its_output_go_back_as_a_tool_turn(
    live_url, primary, secondary
):
    items = [
        {"role": "user", "content": "Add a.txt."},
        {"type": "custom_tool_call", "call_id": "call_9", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_9", "output": "Done!"},
    ]
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    ) as client:
        response = await client.responses.create(model="auto", input=items, tools=[APPLY_PATCH])
    assert response.output_text == "The tool said: Done!"
    *_, call, result = primary.last_request("/api/chat")["body"]["messages"]
    assert call["tool_calls"][0]["function"] == {
        "name": "apply_patch",
        "arguments": {"input": PATCH},
    }
    assert (result["role"], result["content"]) == ("tool", "Done!")


MID_SYSTEM = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello."},
    {"role": "assistant", "content": "Hello."},
    {"role": "developer", "content": "Now in French."},
    {"role": "user", "content": "Again."},
]


async def test_a_chat_system_message_inside_the_conversation_keeps_its_place(
    claude_too, live_url, primary, secondary, claude
):
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    ) as client:
        await client.chat.completions.create(model="auto", messages=MID_SYSTEM)
        sent = primary.last_request("/api/chat")["body"]["messages"]
        assert [(m["role"], m["content"]) for m in sent] == [
            ("system", "Be brief."),
            ("user", "Say hello."),
            ("assistant", "Hello."),
            ("system", "Now in French."),
            ("user", "Again."),
        ]
        await client.chat.completions.create(model="claude", messages=MID_SYSTEM)
    to_claude = claude.last_request("/v1/messages")["body"]
    assert to_claude["system"] == "Be brief.\n\nNow in French."
    assert [m["role"] for m in to_claude["messages"]] == ["user", "assistant", "user"]


async def test_how_each_dialect_was_asked_to_think_is_on_the_ledgers_attempt(
    live_url, gateway, ollama_thinks, secondary
):
    async with claude_sdk(live_url) as client:
        await client.messages.create(
            model="auto", max_tokens=2000, messages=HELLO, thinking=ADAPTIVE
        )
    [record] = await ledger_rows(gateway, at_least=1)
    assert record.attempts[0]["detail"] == "thinking asked as think true"
