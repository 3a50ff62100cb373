"""Every field the official APIs take is taken at the gateway's door for it, never refused for
being unknown: each door's field table is held to the official SDKs' own request types, and a
refusal is one of a short, stated list (what serving without would silently change). Each
parameter the dialect table carries says what every dialect does with it, and the API's
reference page has its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from anthropic.types import message_create_params
from anthropic.types.beta import message_create_params as beta_message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from edge.api.anthropic.request import MESSAGES_BODY
from edge.api.openai.chat_request import CHAT_BODY
from edge.api.openai.responses_request import RESPONSES_BODY
from gateway.adapters import params

pytestmark = pytest.mark.backend_free

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"

# The fields each door refuses, and why serving without them would mislead the client.
DELIBERATE = {
    "messages": {
        "container": "code execution Anthropic runs on its side; no stand-in runs it",
        "mcp_servers": "tools run on Anthropic's side; without them the answer can't use them",
    },
    "responses": {
        "background": "a stored response to poll; nothing is stored",
        "conversation": "a stored conversation; nothing is stored",
        "previous_response_id": "a stored response to continue; nothing is stored",
        "prompt": "a stored prompt template; nothing is stored",
        "context_management": "compaction OpenAI runs on its side",
        "moderation": "a moderation the answer would claim to have passed",
        "top_logprobs": "log probabilities no dialect here gives",
        "truncation": "'auto' would cut the input; 'disabled' is taken",
    },
    "chat": {
        "audio": "an audio answer",
        "function_call": "deprecated: tool_choice says it",
        "functions": "deprecated: tools say it",
        "moderation": "a moderation the answer would claim to have passed",
        "top_logprobs": "log probabilities no dialect here gives",
    },
}
DOORS = {
    "messages": (
        MESSAGES_BODY,
        [
            message_create_params.MessageCreateParamsBase,
            beta_message_create_params.MessageCreateParamsBase,
        ],
    ),
    "responses": (RESPONSES_BODY, [response_create_params.ResponseCreateParamsBase]),
    "chat": (CHAT_BODY, [completion_create_params.CompletionCreateParamsBase]),
}
# What the SDK sends as a header, not a body field (`betas`: anthropic-beta).
NOT_IN_THE_BODY = {"betas"}


def sdk_fields(door: str) -> set[str]:
    return {
        name for params_type in DOORS[door][1] for name in params_type.__annotations__
    } - NOT_IN_THE_BODY


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_field_the_official_sdk_sends_is_known_to_the_door(door):
    body = DOORS[door][0]
    assert sdk_fields(door) - body.known == set()


@pytest.mark.parametrize("door", sorted(DOORS))
def test_the_door_refuses_only_the_stated_few(door):
    body = DOORS[door][0]
    refused = {field.name for field in body.refused}
    assert refused & sdk_fields(door) == set(DELIBERATE[door])


def test_every_parameter_says_what_each_dialect_does_with_it():
    dialects = {params.OPENAI, params.ANTHROPIC, params.OLLAMA}
    for name, rules in params.TABLE.items():
        assert set(rules) == dialects, name
        assert params.described(name)


def test_the_api_reference_has_a_line_for_every_parameter():
    text = DOCS.read_text()
    missing = [name for name in params.TABLE if f"| `{name}` |" not in text]
    assert missing == []
