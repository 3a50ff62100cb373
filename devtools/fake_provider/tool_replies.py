"""The fake provider's tool-call answers, whole and streamed, in Ollama's, OpenAI's and
Anthropic's shapes.

OpenAI's arguments travel as a JSON string (streamed: a first tool-call delta with the id, the
name and "" arguments, then argument fragments), Anthropic's as a `tool_use` block's `input`
(streamed: `input_json_delta` fragments), Ollama's as an object, in one chunk when streamed. The
output token count is the number of argument fragments.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from typing import Any

from devtools.fake_provider.dialects import NDJSON, SSE, Reply, dumps, json_reply
from devtools.fake_provider.tools import ToolCall

# How many pieces a streamed call's argument text is split into (fewer when it is shorter).
FRAGMENTS = 4
_ids = itertools.count(1)
_prefix = secrets.token_hex(6)
_SSE_HEADERS = ((b"cache-control", b"no-cache"),)


def _new_id(prefix: str) -> str:
    return f"{prefix}{_prefix}{next(_ids):012x}"


def arguments_text(call: ToolCall) -> str:
    return json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)


def fragments(text: str, count: int = FRAGMENTS) -> list[str]:
    """`text` cut into at most `count` pieces of near-equal length (never an empty one)."""
    size = max(1, -(-len(text) // count))
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


# OpenAI ------------------------------------------------------------------------------------


def openai_tool_call(
    call: ToolCall,
    *,
    model: str,
    prompt_tokens: int,
    stream: bool,
    include_usage: bool,
) -> Reply:
    text = arguments_text(call)
    pieces = fragments(text)
    completion_id, call_id = _new_id("chatcmpl-"), _new_id("call_")
    created = int(time.time())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(pieces),
        "total_tokens": prompt_tokens + len(pieces),
    }
    head = {"id": completion_id, "created": created, "model": model}
    if not stream:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": text},
                }
            ],
            "refusal": None,
        }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        body = {
            **head,
            "object": "chat.completion",
            "choices": [choice],
            "usage": usage,
            "system_fingerprint": "fp_fake",
        }
        return json_reply(200, body)

    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        event: dict[str, Any] = {
            **head,
            "object": "chat.completion.chunk",
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            event["usage"] = None
        return b"data: " + dumps(event) + b"\n\n"

    first = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    events = [chunk({"role": "assistant", "content": None, "tool_calls": [first]}, None)]
    events.extend(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, None)
        for piece in pieces
    )
    events.append(chunk({}, "tool_calls"))
    if include_usage:
        tail = {
            **head,
            "object": "chat.completion.chunk",
            "system_fingerprint": "fp_fake",
            "choices": [],
            "usage": usage,
        }
        events.append(b"data: " + dumps(tail) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return Reply(200, SSE, events, stream=True, headers=_SSE_HEADERS, separator=b"\n\n")


# Anthropic ---------------------------------------------------------------------------------


def anthropic_tool_use(call: ToolCall, *, model: str, prompt_tokens: int, stream: bool) -> Reply:
    pieces = fragments(arguments_text(call))
    message_id, use_id = _new_id("msg_"), _new_id("toolu_")
    if not stream:
        block = {"type": "tool_use", "id": use_id, "name": call.name, "input": call.arguments}
        body = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": len(pieces)},
        }
        return json_reply(200, body)

    def event(name: str, data: dict[str, Any]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + dumps({"type": name, **data}) + b"\n\n"

    start: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 1},
    }
    block = {"type": "tool_use", "id": use_id, "name": call.name, "input": {}}
    events = [
        event("message_start", {"message": start}),
        event("content_block_start", {"index": 0, "content_block": block}),
        event("ping", {}),
    ]
    events.extend(
        event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}},
        )
        for piece in pieces
    )
    events.append(event("content_block_stop", {"index": 0}))
    events.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": len(pieces)},
            },
        )
    )
    events.append(event("message_stop", {}))
    return Reply(200, SSE, events, stream=True, headers=_SSE_HEADERS, separator=b"\n\n")


# Ollama ------------------------------------------------------------------------------------


def ollama_tool_call(
    call: ToolCall, *, model: str, created_at: str, prompt_tokens: int, stream: bool
) -> Reply:
    """Ollama's answer with message.tool_calls (no id: the reference's shape); streamed, one
    chunk carrying the whole call, then the done line."""
    eval_count = len(fragments(arguments_text(call)))
    prompt_ns, eval_ns, load_ns = 100_000 * prompt_tokens, 1_000_000 * eval_count, 1_000_000
    calls = [{"function": {"name": call.name, "arguments": call.arguments}}]
    final: dict[str, Any] = {
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "stop",
        "total_duration": load_ns + prompt_ns + eval_ns,
        "load_duration": load_ns,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": eval_count,
        "eval_duration": eval_ns,
    }
    if not stream:
        final["message"]["tool_calls"] = calls
        return json_reply(200, final)
    first = {
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": "", "tool_calls": calls},
        "done": False,
    }
    return Reply(200, NDJSON, [dumps(first) + b"\n", dumps(final) + b"\n"], stream=True)
