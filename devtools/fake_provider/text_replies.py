"""The fake provider's text answers (the configured text, cut to the request's token limit),
whole and streamed, in Ollama's, OpenAI's and Anthropic's shapes.

Ollama's stream is NDJSON lines, the last one (`done`) with the durations and counts; OpenAI's
is server-sent chunks, the first carrying the role, then the finish reason, the usage when
`include_usage` asks for it and [DONE]; Anthropic's is the Messages API's events, from
message_start to message_stop. The output token count is the number of the answer's pieces
(words with their leading whitespace), each one a stream chunk.
"""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Any

from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import NDJSON, SSE, Reply, dumps, json_reply, now_rfc3339

_ids = itertools.count(1)
_id_prefix = secrets.token_hex(4)


def answer(config: FakeConfig, limit: int | None) -> tuple[tuple[str, ...], str, str]:
    """The answer cut to `limit` tokens: its pieces, its text and why it stopped."""
    pieces = config.pieces
    if limit is not None and limit < len(pieces):
        pieces = pieces[:limit]
        return pieces, "".join(pieces), "length"
    return pieces, config.full_answer, "stop"


# Ollama ------------------------------------------------------------------------------------


def ollama_chat(
    config: FakeConfig, *, model: str, prompt_tokens: int, limit: int | None, stream: bool
) -> Reply:
    pieces, text, reason = answer(config, limit)
    created_at = now_rfc3339()
    eval_count = len(pieces)
    prompt_ns, eval_ns, load_ns = 100_000 * prompt_tokens, 1_000_000 * eval_count, 1_000_000
    final = {
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": "" if stream else text},
        "done": True,
        "done_reason": reason,
        "total_duration": load_ns + prompt_ns + eval_ns,
        "load_duration": load_ns,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": eval_count,
        "eval_duration": eval_ns,
    }
    if not stream:
        return json_reply(200, final)
    lines = [
        dumps(
            {
                "model": model,
                "created_at": created_at,
                "message": {"role": "assistant", "content": piece},
                "done": False,
            }
        )
        + b"\n"
        for piece in pieces
    ]
    lines.append(dumps(final) + b"\n")
    return Reply(200, NDJSON, lines, stream=True)


# OpenAI ------------------------------------------------------------------------------------


def openai_chat(
    config: FakeConfig,
    *,
    model: str,
    prompt_tokens: int,
    limit: int | None,
    stream: bool,
    include_usage: bool,
) -> Reply:
    pieces, text, reason = answer(config, limit)
    completion_id = f"chatcmpl-{_id_prefix}{next(_ids):08x}"
    created = int(time.time())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(pieces),
        "total_tokens": prompt_tokens + len(pieces),
    }
    if not stream:
        return json_reply(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": reason,
                    }
                ],
                "usage": usage,
                "system_fingerprint": "fp_fake",
            },
        )

    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        event: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            event["usage"] = None
        return b"data: " + dumps(event) + b"\n\n"

    # The first chunk carries the role (and the first piece of the answer).
    first, rest = (pieces[0], pieces[1:]) if pieces else ("", ())
    events = [chunk({"role": "assistant", "content": first}, None)]
    events.extend(chunk({"content": piece}, None) for piece in rest)
    events.append(chunk({}, reason))
    if include_usage:
        tail = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [],
            "usage": usage,
        }
        events.append(b"data: " + dumps(tail) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return Reply(
        200, SSE, events, stream=True, headers=((b"cache-control", b"no-cache"),), separator=b"\n\n"
    )


# Anthropic ---------------------------------------------------------------------------------


def anthropic_messages(
    config: FakeConfig, *, model: str, prompt_tokens: int, limit: int | None, stream: bool
) -> Reply:
    """A Messages API answer: content blocks, stop reason, usage; streamed as Anthropic's
    server-sent events when `stream`."""
    pieces, text, reason = answer(config, limit)
    message_id = f"msg_{_id_prefix}{next(_ids):08x}"
    stop_reason = "max_tokens" if reason == "length" else "end_turn"
    if not stream:
        return json_reply(
            200,
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": len(pieces)},
            },
        )

    def event(name: str, data: dict[str, Any]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + dumps({"type": name, **data}) + b"\n\n"

    # The message starts empty, with the output count Anthropic reports before the first token;
    # message_delta carries the final count.
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
    events = [
        event("message_start", {"message": start}),
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        event("ping", {}),
    ]
    events.extend(
        event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
        for piece in pieces
    )
    events.append(event("content_block_stop", {"index": 0}))
    events.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": len(pieces)},
            },
        )
    )
    events.append(event("message_stop", {}))
    return Reply(
        200, SSE, events, stream=True, headers=((b"cache-control", b"no-cache"),), separator=b"\n\n"
    )
