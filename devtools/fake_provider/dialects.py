"""The fake provider's dialects and what they share (their names, `Reply` and its content types,
the prompt's token estimate), and what the fake says outside a chat answer, in Ollama's,
OpenAI's and Anthropic's words: the model lists and the errors.

Each builder returns a `Reply` (status, headers, body chunks); `app` decides how it is delivered
(whole or streamed, paced, broken or cut). The chat answers themselves are `text_replies`' (the
configured text) and `tool_replies`' (a tool call). A prompt's token count is a cheap
deterministic estimate: the number of whitespace-separated words of its messages' text
(`count_words`).
"""

from __future__ import annotations

import hashlib
import json
import re
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


def now_rfc3339() -> str:
    """Now as Ollama writes its `created_at`."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Model lists -------------------------------------------------------------------------------


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


def openai_models(config: FakeConfig) -> Reply:
    data = [
        {"id": name, "object": "model", "created": _MODEL_CREATED, "owned_by": "fake-provider"}
        for name in config.models
    ]
    return json_reply(200, {"object": "list", "data": data})


# Errors ------------------------------------------------------------------------------------


def ollama_unmarshal_error(value: Any, field: str, go_type: str) -> Reply:
    """Ollama's 400 for a message field of the wrong type: Go's JSON decoding error."""
    kind = {bool: "bool", dict: "object", list: "array", str: "string"}.get(type(value), "number")
    message = (
        f"json: cannot unmarshal {kind} into Go struct field Message.messages.{field} of type "
        f"{go_type}"
    )
    return json_reply(400, {"error": message})


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
