"""OpenAI's Codex CLI (`codex exec`, the version pinned in package.json) through the gateway's
Responses door, configured as a provider of its own (`wire_api = "responses"`) with its
defaults: streaming, its tools (a namespace of functions and the hosted web search among
them) and its developer messages. The fake provider behind calls Codex's shell tool
(`exec_command`) to print a file of the working directory; Codex runs it in its sandbox and
sends the output back; the provider's second answer quotes it ("The tool said: ...").
"""

from __future__ import annotations

import pytest

from devtools.fake_provider import FakeProvider
from tests.agents.conftest import NOTES, NOTES_TEXT, AgentRun
from tests.providers.conftest import ledger_rows

pytestmark = [pytest.mark.slow, pytest.mark.agents, pytest.mark.django_db(transaction=True)]

PROMPT = "Print notes.txt and tell me the secret word."
TOLD = "The tool said: "
SHELL = "exec_command"
COMMAND = f"cat {NOTES}"


def runs_the_shell(fake: FakeProvider) -> None:
    """The fake's tool call goes to Codex's shell, to print the file (whose text is nowhere
    in the conversation until the command has run)."""
    fake.set_fault(tool_name=SHELL, tool_arguments={"cmd": COMMAND})


def finished(run: AgentRun) -> str:
    """The final answer, which `codex exec` alone prints on stdout."""
    assert run.returncode == 0, str(run)
    return run.stdout.strip()


@pytest.mark.parametrize(
    ("model", "tier", "provider", "path"),
    [
        ("auto", "primary", "ollama-local", "/api/chat"),
        ("gpt-4o-mini", "secondary", "openai-cloud", "/v1/chat/completions"),
    ],
    ids=["auto", "model-name"],
)
async def test_codex_runs_a_shell_command_and_answers_with_its_output(
    codex, gateway, primary, secondary, model, tier, provider, path
):
    fake = {"ollama-local": primary, "openai-cloud": secondary}[provider]
    runs_the_shell(fake)

    answer = finished(await codex.exec(PROMPT, model=model))

    assert answer.startswith(TOLD) and NOTES_TEXT in answer
    assert fake.calls_to(path) == 2
    sent = fake.last_request(path)["body"]
    assert SHELL in {tool["function"]["name"] for tool in sent["tools"]}
    *_, call, result = sent["messages"]
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == SHELL
    assert result["role"] == "tool"
    assert NOTES_TEXT in str(result["content"])
    rows = await ledger_rows(gateway, at_least=2)
    assert [(row.tier, row.final_provider, row.outcome) for row in rows] == [
        (tier, provider, "ok"),
        (tier, provider, "ok"),
    ]


async def test_codex_finishes_its_task_while_the_first_provider_answers_500(
    codex, gateway, primary, secondary
):
    primary.set_fault(mode="error", status=500)
    runs_the_shell(secondary)

    answer = finished(await codex.exec(PROMPT))

    assert answer.startswith(TOLD) and NOTES_TEXT in answer
    assert secondary.calls_to("/v1/chat/completions") == 2
    *_, call, result = secondary.last_request("/v1/chat/completions")["body"]["messages"]
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == SHELL
    assert (result["role"], result["tool_call_id"]) == ("tool", tool_call["id"])
    assert NOTES_TEXT in str(result["content"])
    first, second = await ledger_rows(gateway, at_least=2)
    assert [(a["provider"], a["outcome"]) for a in first.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "ok"),
    ]
    assert {row.final_provider for row in (first, second)} == {"openai-cloud"}
