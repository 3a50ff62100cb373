"""What the fake provider says, in Ollama's, OpenAI's and Anthropic's words: answers, model
lists, errors.

Each builder returns a `Reply` (status, headers, body chunks); `app` decides how it is delivered
(whole or streamed, paced, broken or cut). Token counts are a cheap deterministic estimate: the
number of whitespace-separated words, of the messages' text for the prompt and of the answer for
the output.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devtools.fake_provider.config import FakeConfig

OLLAMA = "ollama"
OPENAI = "openai"
ANTHROPIC = "anthropic"
JSON = b"application/json"
NDJSON = b"application/x-ndjson"
SSE = b"text/event-stream; charset=utf-8"
CONTEXT_WINDOW = 8192
_MODEL_CREATED = 1_715_367_049
_MODIFIED_AT = "2024-07-23T10:00:00.000000000Z"
_ids = itertools.count(1)
_id_prefix = secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    content_type: bytes
    chunks: Sequence[bytes]
    stream: bool = False
    headers: tuple[tuple[bytes, bytes], ...] = ()
    # What ends one streamed event: a newline for NDJSON, a blank line for server-sent events.
    separator: bytes = b"\n"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_reply(status: int, obj: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
    return Reply(status, JSON, (dumps(obj),), headers=headers)


def count_words(messages: Any) -> int:
    """The prompt's token estimate: words of every message's text (string or text parts, and
    tool results)."""
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str):
                    total += len(text.split())
                elif isinstance(part, dict) and part.get("type") == "tool_result":
                    total += count_words([part])  # Anthropic's tool result: its content
    return total


def answer(config: FakeConfig, limit: int | None) -> tuple[tuple[str, ...], str, str]:
    """The answer cut to `limit` tokens: its pieces, its text and why it stopped."""
    pieces = config.pieces
    if limit is not None and limit < len(pieces):
        pieces = pieces[:limit]
        return pieces, "".join(pieces), "length"
    return pieces, config.full_answer, "stop"


def _now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Ollama ------------------------------------------------------------------------------------


def ollama_chat(
    config: FakeConfig, *, model: str, prompt_tokens: int, limit: int | None, stream: bool
) -> Reply:
    pieces, text, reason = answer(config, limit)
    created_at = _now_rfc3339()
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


def ollama_unmarshal_error(value: Any, field: str, go_type: str) -> Reply:
    """Ollama's 400 for a message field of the wrong type: Go's JSON decoding error."""
    kind = {bool: "bool", dict: "object", list: "array", str: "string"}.get(type(value), "number")
    message = (
        f"json: cannot unmarshal {kind} into Go struct field Message.messages.{field} of type "
        f"{go_type}"
    )
    return json_reply(400, {"error": message})


def _ollama_model(name: str) -> dict[str, Any]:
    family = re.match(r"[a-z]*", name.lower())
    size = re.search(r":(\d+(?:\.\d+)?)b", name.lower())
    return {
        "name": name,
        "model": name,
        "modified_at": _MODIFIED_AT,
        "size": 4_920_753_328,
        "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": (family and family.group()) or "fake",
            "families": [(family and family.group()) or "fake"],
            "parameter_size": f"{float(size.group(1)) if size else 8.0:.1f}B",
            "quantization_level": "Q4_K_M",
        },
    }


def ollama_tags(config: FakeConfig) -> Reply:
    return json_reply(200, {"models": [_ollama_model(name) for name in config.models]})


def ollama_ps(config: FakeConfig) -> Reply:
    expires = "2099-01-01T00:00:00Z"
    models = [
        {**_ollama_model(name), "expires_at": expires, "size_vram": 4_920_753_328}
        for name in config.models
    ]
    return json_reply(200, {"models": models})


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


def openai_models(config: FakeConfig) -> Reply:
    data = [
        {"id": name, "object": "model", "created": _MODEL_CREATED, "owned_by": "fake-provider"}
        for name in config.models
    ]
    return json_reply(200, {"object": "list", "data": data})


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


_ANTHROPIC_ERRORS = {
    "unauthorized": (401, "authentication_error"),
    "model_not_found": (404, "not_found_error"),
    "context_too_long": (400, "invalid_request_error"),
    "rate_limit": (429, "rate_limit_error"),
    "bad_request": (400, "invalid_request_error"),
    "overloaded": (529, "overloaded_error"),
}


def _anthropic_error(
    kind: str, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...]
) -> Reply:
    status, error_type = _ANTHROPIC_ERRORS.get(kind, (status, "api_error"))
    if kind == "context_too_long":
        message = f"prompt is too long: {CONTEXT_WINDOW + 1} tokens > {CONTEXT_WINDOW} maximum"
    elif kind == "overloaded":
        message = "Overloaded"
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return json_reply(status, body, headers)


# Errors ------------------------------------------------------------------------------------


def error(
    dialect: str,
    kind: str,
    *,
    status: int = 500,
    model: str = "",
    message: str = "",
    param: str | None = None,
    prompt_tokens: int = 0,
    retry_after: str | None = None,
) -> Reply:
    """The error a real provider of `dialect` answers for `kind`, in its own shape."""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    code: str | None = None
    error_type = "invalid_request_error"
    if kind == "unauthorized":
        status, code = 401, "invalid_api_key"
        message = message or (
            "Incorrect API key provided. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )
        ollama_message = "unauthorized"
    elif kind == "model_not_found":
        status, code = 404, "model_not_found"
        message = f"The model `{model}` does not exist or you do not have access to it."
        ollama_message = f'model "{model}" not found, try pulling it first'
    elif kind == "context_too_long":
        status, code, param = 400, "context_length_exceeded", "messages"
        message = (
            f"This model's maximum context length is {CONTEXT_WINDOW} tokens. However, your "
            f"messages resulted in {CONTEXT_WINDOW + 1 + prompt_tokens} tokens. Please reduce "
            "the length of the messages."
        )
        ollama_message = "input length exceeds the context length"
    elif kind == "rate_limit":
        status, code, error_type = 429, "rate_limit_exceeded", "requests"
        message = "Rate limit reached for requests. Please try again later."
        ollama_message = "rate limit exceeded"
        if retry_after is not None:
            headers = ((b"retry-after", retry_after.encode("ascii")),)
    elif kind == "bad_request":
        status = 400
        message = message or "Invalid request (the fake provider's bad_request fault)."
        ollama_message = message
    elif kind == "overloaded":  # Anthropic's 529; elsewhere a plain 503
        status, error_type = 503, "server_error"
        message = "The server is overloaded."
        ollama_message = message
    else:  # "error": a server-side failure with the configured status
        error_type = "server_error"
        message = message or "The server had an error while processing your request."
        ollama_message = message
    if dialect == OLLAMA:
        return json_reply(status, {"error": ollama_message}, headers)
    if dialect == ANTHROPIC:
        return _anthropic_error(kind, status, message, headers)
    body = {"message": message, "type": error_type, "param": param, "code": code}
    return json_reply(status, {"error": body}, headers)
