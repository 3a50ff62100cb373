"""The fake provider's thinking, shared by the dialects: the thought itself, the signature of an
Anthropic thinking block, what thinking a request carried back, and OpenAI-compatible
`reasoning_content`.

The thought is always THINKING_TEXT. Ollama's (`ollama_extra`) and Anthropic's
(`anthropic_thinking`) shapes live with their dialects; OpenAI's chat completions have no
thinking of their own, so the fake answers as DeepSeek's and vLLM's OpenAI-compatible servers
do: with `reasoning_effort` set (other than "none") to a model in `thinking_models`, the message
carries `reasoning_content`, streamed as `delta.reasoning_content` chunks before the content,
and the usage counts it as `completion_tokens_details.reasoning_tokens`.

The signature scheme (`sign`): base64 of SIGNATURE_MARK followed by HMAC-SHA256, keyed with the
config's `signature_key`, over the block's `thinking` text as the fake sent it. It binds the
text (an edited thought no longer verifies) and the key (another fake's thinking doesn't),
never the model or the conversation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from devtools.fake_provider import dialects
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import OPENAI, SSE, Reply, dumps, json_reply

THINKING_TEXT = "Let me think about this."
SIGNATURE_MARK = b"fake-provider-thinking/v1:"
# OpenAI's ReasoningEffort (the reference's openai-openapi.json).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def pieces() -> tuple[str, ...]:
    """The thought split into tokens, each one a streamed chunk."""
    return FakeConfig(text=THINKING_TEXT).pieces


def sign(text: str, key: str) -> str:
    """The signature of a thinking block whose `thinking` is `text`."""
    digest = hmac.new(key.encode(), text.encode(), hashlib.sha256).digest()
    return base64.b64encode(SIGNATURE_MARK + digest).decode("ascii")


def signed_here(text: Any, signature: Any, key: str) -> bool:
    """Whether `signature` is the one the fake, keyed with `key`, made for `text`."""
    if not isinstance(text, str) or not isinstance(signature, str):
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return False
    return raw.startswith(SIGNATURE_MARK) and hmac.compare_digest(
        raw, base64.b64decode(sign(text, key))
    )


# What a request carried back ------------------------------------------------------------------


class ThinkingSource(StrEnum):
    """Where a request carried a thought."""

    ANTHROPIC_THINKING = "thinking"  # an assistant message's thinking block
    ANTHROPIC_REDACTED = "redacted_thinking"  # its redacted_thinking block (`data`)
    OLLAMA = "message.thinking"  # an Ollama message's `thinking`
    REASONING_CONTENT = "reasoning_content"  # an OpenAI-compatible assistant message's


@dataclass(frozen=True, slots=True)
class ReceivedThinking:
    """One thought a request carried: in messages[message] (and its content[block] for
    Anthropic's blocks); `signed_here` says whether its signature is one this fake made."""

    message: int
    block: int | None
    source: ThinkingSource
    text: str
    signature: str | None
    signed_here: bool


def received(body: Any, key: str) -> tuple[ReceivedThinking, ...]:
    """Every thought in a chat request's messages, in order, in any dialect's shape."""
    messages = body.get("messages") if isinstance(body, dict) else None
    found: list[ReceivedThinking] = []
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        for position, block in enumerate(content if isinstance(content, list) else []):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == ThinkingSource.ANTHROPIC_THINKING:
                text, signature = block.get("thinking"), block.get("signature")
                found.append(
                    ReceivedThinking(
                        index,
                        position,
                        ThinkingSource.ANTHROPIC_THINKING,
                        text if isinstance(text, str) else "",
                        signature if isinstance(signature, str) else None,
                        signed_here(text, signature, key),
                    )
                )
            elif kind == ThinkingSource.ANTHROPIC_REDACTED:
                data = block.get("data")
                found.append(
                    ReceivedThinking(
                        index,
                        position,
                        ThinkingSource.ANTHROPIC_REDACTED,
                        "",
                        data if isinstance(data, str) else None,
                        False,  # the fake never redacts, so none is its own
                    )
                )
        for field, source in (
            ("thinking", ThinkingSource.OLLAMA),
            ("reasoning_content", ThinkingSource.REASONING_CONTENT),
        ):
            text = message.get(field)
            if isinstance(text, str) and text:
                found.append(ReceivedThinking(index, None, source, text, None, False))
    return tuple(found)


# OpenAI-compatible reasoning_content ----------------------------------------------------------


def openai_reasons(request: dict[str, Any], config: FakeConfig) -> bool | Reply:
    """Whether the answer carries reasoning_content, or OpenAI's 400 for a bad effort."""
    effort = request.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        listed = ", ".join(f"'{value}'" for value in REASONING_EFFORTS[:-1])
        return dialects.error(
            OPENAI,
            "bad_request",
            message=(
                f"Invalid value: '{effort}'. Supported values are: {listed} and "
                f"'{REASONING_EFFORTS[-1]}'."
            ),
            param="reasoning_effort",
        )
    return effort not in (None, "none") and request["model"] in config.thinking_models


def with_reasoning_content(reply: Reply) -> Reply:
    """An OpenAI chat completion (text or tool call) with the thought as `reasoning_content`:
    on the message when whole; streamed, as chunks before the first one (which then no longer
    repeats the role); the usage counting it as reasoning tokens."""
    thought = pieces()
    if not reply.stream:
        body = json.loads(reply.chunks[0])
        message = body["choices"][0]["message"]
        body["choices"][0]["message"] = {
            "role": message.pop("role"),
            "content": message.pop("content"),
            "reasoning_content": THINKING_TEXT,
            **message,
        }
        _count_reasoning(body["usage"], len(thought))
        return json_reply(reply.status, body, reply.headers)
    chunks: list[bytes] = []
    for chunk in reply.chunks:
        payload = chunk.removeprefix(b"data: ").strip()
        if payload == b"[DONE]":
            chunks.append(chunk)
            continue
        event = json.loads(payload)
        if event["choices"] and not chunks:  # the first chunk: the thought goes before it
            for number, piece in enumerate(thought):
                delta = {"reasoning_content": piece}
                if not number:
                    delta = {"role": "assistant", **delta}
                head = {**event, "choices": [{**event["choices"][0], "delta": delta}]}
                chunks.append(b"data: " + dumps(head) + b"\n\n")
            event["choices"][0]["delta"].pop("role", None)
        if isinstance(event.get("usage"), dict):
            _count_reasoning(event["usage"], len(thought))
        chunks.append(b"data: " + dumps(event) + b"\n\n")
    return Reply(
        reply.status, SSE, chunks, stream=True, headers=reply.headers, separator=reply.separator
    )


def _count_reasoning(usage: dict[str, Any], tokens: int) -> None:
    usage["completion_tokens"] += tokens
    usage["total_tokens"] += tokens
    usage["completion_tokens_details"] = {"reasoning_tokens": tokens}
