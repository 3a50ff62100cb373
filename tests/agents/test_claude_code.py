"""Claude Code (`claude -p`, the version pinned in package.json) through the gateway's Messages
door with its defaults: streaming, thinking, its betas and its own tools. The fake provider
behind calls Claude Code's Read tool on a file in the working directory; Claude Code reads it
and sends the result back; the provider's second answer quotes it ("The tool said: ...").

Claude Code runs here as root, where it refuses --dangerously-skip-permissions and the
bypassPermissions mode: Read of a file in the working directory needs no permission in its
default mode.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.fake_provider import FakeProvider
from devtools.fake_provider.thinking import THINKING_TEXT
from tests.agents.conftest import NOTES_TEXT, AgentRun, ClaudeCode
from tests.providers.conftest import CLAUDE_MODEL, ledger_rows, update_provider

pytestmark = [pytest.mark.slow, pytest.mark.agents, pytest.mark.django_db(transaction=True)]

PROMPT = "Read notes.txt and tell me the secret word."
TOLD = "The tool said: "
STREAM_JSON = ("--output-format", "stream-json", "--verbose")


def reads_the_notes(fake: FakeProvider, claude_code: ClaudeCode) -> None:
    """The fake's tool call goes to Claude Code's Read, for the file in its working dir."""
    fake.set_fault(tool_name="Read", tool_arguments={"file_path": str(claude_code.notes)})


def finished(run: AgentRun) -> str:
    assert run.returncode == 0, str(run)
    return run.stdout.strip()


def blocks(events: list[dict[str, Any]], role: str, kind: str) -> list[dict[str, Any]]:
    """The content blocks of type `kind` in the `role` ("assistant", "user") events of a
    stream-json run, in order."""
    found = []
    for event in events:
        if event["type"] == role:
            content = event["message"]["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            found.extend(block for block in content if block["type"] == kind)
    return found


def ollama_turns(fake: FakeProvider) -> list[dict[str, Any]]:
    """The conversation the Ollama fake was last sent: Claude Code's second turn."""
    return fake.last_request("/api/chat")["body"]["messages"]


def assert_the_result_went_back_to_ollama(fake: FakeProvider, claude_code: ClaudeCode) -> None:
    assert fake.calls_to("/api/chat") == 2
    *_, call, result = ollama_turns(fake)
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == "Read"
    assert tool_call["function"]["arguments"] == {"file_path": str(claude_code.notes)}
    assert (result["role"], result["tool_name"]) == ("tool", "Read")
    assert NOTES_TEXT in result["content"]


async def test_claude_code_reads_a_file_and_answers_with_what_it_read(
    claude_code, gateway, primary, secondary
):
    reads_the_notes(primary, claude_code)

    answer = finished(await claude_code.run(PROMPT))

    assert answer.startswith(TOLD) and NOTES_TEXT in answer
    assert_the_result_went_back_to_ollama(primary, claude_code)
    offered = {
        tool["function"]["name"] for tool in primary.last_request("/api/chat")["body"]["tools"]
    }
    assert {"Read", "Bash", "Edit", "Write"} <= offered
    assert secondary.calls == 0
    rows = await ledger_rows(gateway, at_least=2)
    assert [(row.tier, row.final_provider, row.outcome) for row in rows] == [
        ("primary", "ollama-local", "ok"),
        ("primary", "ollama-local", "ok"),
    ]


async def test_claude_code_streams_its_turns_as_json_events(
    claude_code, gateway, primary, secondary
):
    reads_the_notes(primary, claude_code)

    events = (await claude_code.run(PROMPT, *STREAM_JSON)).events()

    kinds = [event["type"] for event in events]
    assert kinds[0] == "system" and kinds[-1] == "result"
    [use] = blocks(events, "assistant", "tool_use")
    assert (use["name"], use["input"]) == ("Read", {"file_path": str(claude_code.notes)})
    [result] = blocks(events, "user", "tool_result")
    assert result["tool_use_id"] == use["id"] and not result.get("is_error")
    assert NOTES_TEXT in str(result["content"])
    *_, said = blocks(events, "assistant", "text")
    assert said["text"].startswith(TOLD) and NOTES_TEXT in said["text"]
    final = events[-1]
    assert (final["subtype"], final["is_error"]) == ("success", False)
    assert final["result"] == said["text"]
    assert_the_result_went_back_to_ollama(primary, claude_code)
    rows = await ledger_rows(gateway, at_least=2)
    assert {(row.final_provider, row.outcome) for row in rows} == {("ollama-local", "ok")}


@pytest.mark.parametrize("flags", [(), STREAM_JSON], ids=["text", "stream-json"])
async def test_claude_code_on_a_claude_model_name_is_served_by_anthropic_behind(
    claude_code, gateway, anthropic_only, claude, flags
):
    """`--model claude-haiku-4-5`: a model a provider serves, and one Claude Code knows (its
    thinking is a budget there, where `auto` gets its adaptive thinking)."""
    reads_the_notes(claude, claude_code)

    run = await claude_code.run(PROMPT, *flags, model=CLAUDE_MODEL)

    finished(run)
    answer = run.events()[-1]["result"] if flags else run.stdout.strip()
    assert answer.startswith(TOLD) and NOTES_TEXT in answer
    assert claude.calls_to("/v1/messages") == 2
    sent = claude.last_request("/v1/messages")["body"]
    assert sent["model"] == CLAUDE_MODEL
    *_, call, result = sent["messages"]
    [use] = [block for block in call["content"] if block["type"] == "tool_use"]
    assert (use["name"], use["input"]) == ("Read", {"file_path": str(claude_code.notes)})
    [tool_result] = [block for block in result["content"] if block["type"] == "tool_result"]
    assert tool_result["tool_use_id"] == use["id"]
    assert NOTES_TEXT in str(tool_result["content"])
    rows = await ledger_rows(gateway, at_least=2)
    assert {(row.final_provider, row.outcome) for row in rows} == {("anthropic-cloud", "ok")}


async def test_claude_codes_thinking_reaches_a_provider_that_thinks_and_comes_back_signed(
    claude_code, gateway, anthropic_only, claude
):
    """Thinking is on by default in Claude Code; behind, a provider that thinks when asked: the
    thought shows in Claude Code's events, and its second turn hands it back to Anthropic with
    the signature Anthropic made, beside the tool's result."""
    await update_provider(gateway, "anthropic-cloud", supports_thinking=True)
    reads_the_notes(claude, claude_code)

    events = (await claude_code.run(PROMPT, *STREAM_JSON, model=CLAUDE_MODEL)).events()

    final = events[-1]
    assert (final["subtype"], final["is_error"]) == ("success", False), final
    assert final["result"].startswith(TOLD) and NOTES_TEXT in final["result"]
    thoughts = blocks(events, "assistant", "thinking")
    assert thoughts and {block["thinking"] for block in thoughts} == {THINKING_TEXT}
    sent = claude.last_request("/v1/messages")["body"]
    assert sent["thinking"]["type"] in ("enabled", "adaptive")
    [back] = claude.thinking_received("/v1/messages")
    assert back.signed_here and back.text == THINKING_TEXT
    [tool_result] = [
        block for block in sent["messages"][-1]["content"] if block["type"] == "tool_result"
    ]
    assert NOTES_TEXT in str(tool_result["content"])


@pytest.mark.parametrize("flags", [(), STREAM_JSON], ids=["text", "stream-json"])
async def test_claude_code_finishes_its_task_while_the_first_provider_answers_500(
    claude_code, gateway, primary, secondary, flags
):
    primary.set_fault(mode="error", status=500)
    reads_the_notes(secondary, claude_code)

    run = await claude_code.run(PROMPT, *flags)

    finished(run)
    answer = run.events()[-1]["result"] if flags else run.stdout.strip()
    assert answer.startswith(TOLD) and NOTES_TEXT in answer
    assert secondary.calls_to("/v1/chat/completions") == 2
    *_, call, result = secondary.last_request("/v1/chat/completions")["body"]["messages"]
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == "Read"
    assert (result["role"], result["tool_call_id"]) == ("tool", tool_call["id"])
    assert NOTES_TEXT in str(result["content"])
    first, second = await ledger_rows(gateway, at_least=2)
    assert [(a["provider"], a["outcome"]) for a in first.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "ok"),
    ]
    assert [(row.tier, row.final_provider) for row in (first, second)] == [
        ("secondary", "openai-cloud"),
        ("secondary", "openai-cloud"),
    ]
