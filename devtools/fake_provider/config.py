"""The fake provider's configuration (`FakeConfig`): the fault it plays, what it answers and what
its models can do. A config is an immutable value: `FakeConfig.updated` checks each field it
changes and raises `ConfigError` naming a bad one. The current config, and the call counters,
are `state.FakeState`'s.

The fault modes (`mode`), played on the chat endpoints, or on every endpoint when scope is "all":

- ok: answer normally.
- hang: answer nothing until the client goes away (at most HANG_CAP_SECONDS, then a 504).
- slow: wait delay_ms (± jitter_ms), then answer; nothing at all is sent before.
- stall: a streamed answer sends its status and headers at once, then waits delay_ms (± jitter_ms)
  before the first chunk (time-to-first-token), or, with after_chunks K, sends its first K chunks
  at once and then waits (a pause mid-answer); an answer that is not streamed waits like slow.
- error, rate_limit, unauthorized, bad_request, context_too_long, overloaded: the error a real
  provider answers, in the dialect's shape (error with the configured status, rate_limit with
  retry_after as its Retry-After header).
- malformed: a 200 whose body (or a stream's first chunk) is broken off mid-JSON.
- cut_stream: the first chunk of a stream (or half of a whole body), delay_ms, then the
  connection dropped; with cut_after_bytes N, the first N bytes of the body instead.
- stream_error: a stream's first text (with after_chunks K: its first K chunks), then the
  dialect's error event (the stream breaks with an error in its own words; Ollama's is an
  {"error": ...} line); an answer that is not streamed is an `error`.
- loading: the model is not in memory (after a restart, or its keep_alive ran out). The first
  chat call loads it (load_ms); calls meanwhile wait for the same load, which a client leaving
  doesn't stop. Loaded, each call answers after delay_ms (± jitter_ms); Ollama's answers carry
  the wait as `load_duration`, and /api/ps lists the model only once it is loaded.
- busy: Ollama's 503 when its queue is full ({"error": "server busy, please try again.  maximum
  pending requests exceeded"}); elsewhere the dialect's overloaded error.

The chat endpoints are Ollama's /api/chat and /api/generate, OpenAI's /v1/chat/completions,
Anthropic's /v1/messages, and the embeddings (/api/embed, /v1/embeddings).

What the models can do (`tools`, `ollama_extra`, `thinking`, `anthropic_thinking`, `images`,
`embeddings`):

- tool_arguments: the arguments of every tool call the fake answers (a JSON object); None: a
  minimal instance of the tool's schema.
- tool_name: the tool the fake's one call goes to when the request offers a tool of that name
  (Claude Code's "Read", Codex's "shell"), whether the tool choice is absent, "auto",
  "required", "any" or OpenAI's allowed_tools listing it. A tool choice that forces one named
  tool still gets that tool (as a real model must), "none" still gets no call, and a request
  that doesn't offer tool_name gets today's rule: the choice's tool, else the first tool.
  None (the default): that rule always.
- thinking_models: the models that think on Ollama (`thinking`, by default unless think false)
  and on OpenAI's chat completions when the request sets `reasoning_effort` (other than
  "none"): the message carries `reasoning_content`, streamed as `delta.reasoning_content`
  before the content, as DeepSeek's and vLLM's OpenAI-compatible servers do. Anthropic's
  Messages API thinks for any model the request asks to (`thinking` enabled or adaptive): a
  `thinking` block with a signature first (`anthropic_thinking`). The thought is always
  THINKING_TEXT (`thinking`). What thinking a request carried back is
  `FakeProvider.thinking_received(path)`.
- signature_key: the key of the HMAC that signs the Anthropic thinking blocks the fake makes
  and checks the ones a request carries back; two fakes with different keys refuse each
  other's thinking, as two providers of the Anthropic dialect do (`thinking.sign`).
- vision_models: the chat models that take images (Anthropic's `image` blocks, OpenAI's
  `image_url` parts, Ollama's `images`); None (the default): every chat model. Another model
  answers an image with its provider's own 400 (`images`).
- describe_images: true (the default): a chat request carrying images (anywhere in its
  messages, tool results included) is answered, in place of the configured text and of a tool
  result's echo, with one line per image in the order they come: "image <n>: <byte count>
  bytes sha256 <hex digest>" over the decoded bytes, or "image <n>: url <url>" for an http(s)
  URL taken as given. A tool call (tools offered, no tool result last) and JSON output stay
  what they were. false: images change no answer (they are still checked).
- tool_models: the models that take tools on Ollama; None: every chat model.
- embedding_models: the models that embed (no other model does).
- context_length: what /api/show reports, and the limit /api/embed's truncate false enforces.
- embedding_dimensions: a vector's length when the request names none.
- disobey: answers that ignore what the request required, as a careless model's do (each only
  where the request has tools or asks for JSON; `disobey.disobeyed`): "text" answers plain text
  (no tool call, no JSON), "unknown_tool" calls a tool the request never offered, "off_schema"
  answers JSON that matches no schema of the request's; "" (the default) obeys.
- content_encoding: how a whole (not streamed) answer's body is encoded: "gzip" compressed,
  with `Content-Encoding: gzip`, as a server behind a compressing proxy answers; "bad_gzip"
  the header over a body that isn't gzip; "" (the default) sent as it is.

`jitter_ms` spreads slow's and stall's wait: each call draws it uniformly from delay_ms ±
jitter_ms (never below 0), so "answers normally take 4-8 s" is delay_ms 6000, jitter_ms 2000.

"Connection refused" is not a mode (a refused connection never reaches the app): POST
/_control/refuse {"for_ms": N} closes the listening socket and drops every open connection at
once, then listens on the same port again N ms later (`FakeProvider.refuse` in-process).

`echo_key` makes every error (the modes above, a refused key, error_rate's failures) quote the
credentials the request carried (its Authorization or x-api-key header) in its message, as a
careless server or proxy might (`leaks`).

`chunk_delay_ms` paces any streamed answer, whatever the mode: it is the wait between one chunk
and the next, so a stream can be made to last long enough to cut or cancel it midway.

`piece_chars` cuts the answer into pieces of that many characters instead of words (0, the
default: words with their leading whitespace): each piece a stream chunk and a token, so a word
(a key the answer quotes, say) can be made to arrive split across chunks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any

MODES = (
    "ok", "hang", "slow", "error", "rate_limit", "unauthorized",
    "malformed", "bad_request", "context_too_long", "cut_stream", "overloaded", "stall",
    "stream_error", "busy", "loading",
)  # fmt: skip
SCOPES = ("chat", "all")
DISOBEY = ("", "text", "unknown_tool", "off_schema")
CONTENT_ENCODINGS = ("", "gzip", "bad_gzip")
DEFAULT_MODELS = ("llama3.1:8b", "gpt-4o-mini")
DEFAULT_TEXT = "This is the fake provider's answer to your question."
DEFAULT_SIGNATURE_KEY = "fake-provider"
# The hang mode's cap: a client without a timeout still gets its connection back eventually.
HANG_CAP_SECONDS = 300.0
# Bounds of after_chunks and cut_after_bytes: far past any answer the fake gives.
MAX_CHUNKS = 100_000
MAX_BODY_BYTES = 10_000_000
DEFAULT_CONTEXT_LENGTH = 8192
DEFAULT_EMBEDDING_DIMENSIONS = 8
MAX_EMBEDDING_DIMENSIONS = 4096
_PIECES = re.compile(r"\s*\S+")


class ConfigError(ValueError):
    """An invalid control value; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class FakeConfig:
    mode: str = "ok"
    delay_ms: int = 0
    chunk_delay_ms: int = 0
    jitter_ms: int = 0
    after_chunks: int = 0
    cut_after_bytes: int = 0
    status: int = 500
    retry_after: str | None = None
    error_rate: float = 0.0
    scope: str = "chat"
    text: str = DEFAULT_TEXT
    models: tuple[str, ...] = DEFAULT_MODELS
    api_key: str | None = None
    echo_key: bool = False
    tool_arguments: dict[str, Any] | None = None
    tool_name: str | None = None
    thinking_models: tuple[str, ...] = ()
    signature_key: str = DEFAULT_SIGNATURE_KEY
    vision_models: tuple[str, ...] | None = None
    describe_images: bool = True
    tool_models: tuple[str, ...] | None = None
    embedding_models: tuple[str, ...] = ()
    context_length: int = DEFAULT_CONTEXT_LENGTH
    embedding_dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS
    disobey: str = ""
    load_ms: int = 0  # the loading mode's load
    content_encoding: str = ""
    piece_chars: int = 0  # the answer's pieces: this many characters each (0: words)
    # The answer split into tokens (words with their leading whitespace, or `piece_chars`
    # characters): joining the first n gives the answer cut to n tokens, and each one is a
    # stream chunk.
    pieces: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size, text = self.piece_chars, self.text
        pieces = (
            [text[i : i + size] for i in range(0, len(text), size)]
            if size
            else _PIECES.findall(text)
        )
        object.__setattr__(self, "pieces", tuple(pieces))

    @cached_property
    def full_answer(self) -> str:
        return "".join(self.pieces)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["pieces"]
        for name in ("models", "thinking_models", "embedding_models"):
            data[name] = list(getattr(self, name))
        for name in ("tool_models", "vision_models"):
            if getattr(self, name) is not None:
                data[name] = list(getattr(self, name))
        return data

    def supports_tools(self, model: str) -> bool:
        return self.tool_models is None or model in self.tool_models

    def supports_vision(self, model: str) -> bool:
        return self.vision_models is None or model in self.vision_models

    def updated(self, changes: Mapping[str, Any]) -> FakeConfig:
        """A copy with `changes` applied; raises ConfigError naming the first bad field."""
        clean: dict[str, Any] = {}
        for name, value in changes.items():
            validator = _VALIDATORS.get(name)
            if validator is None:
                raise ConfigError(name, "unknown field")
            clean[name] = validator(name, value)
        return replace(self, **clean)


def _choice(options: tuple[str, ...]) -> Any:
    def check(name: str, value: Any) -> str:
        if value not in options:
            raise ConfigError(name, f"must be one of {', '.join(options)}")
        return str(value)

    return check


def _int_between(low: int, high: int) -> Any:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(name, f"must be an integer from {low} to {high}")
        return value

    return check


def refuse_seconds(value: Any) -> float:
    """POST /_control/refuse's `for_ms`, checked like the fault fields, in seconds."""
    return _int_between(1, int(HANG_CAP_SECONDS * 1000))("for_ms", value) / 1000


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(name, "must be a number from 0 to 1")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, "must be true or false")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, "must be a string")
    return value


def _optional_string(name: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(name, "must be a non-empty string or null")
    return value


def _non_empty_string(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(name, "must be a non-empty string")
    return value


def _header_value(name: str, value: Any) -> str | None:
    if value is not None and (
        not isinstance(value, str) or not value or not value.isascii() or not value.isprintable()
    ):
        raise ConfigError(name, "must be a non-empty printable ASCII string or null")
    return value


def _models(name: str, value: Any) -> tuple[str, ...]:
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(model, str) and model for model in value)
    ):
        raise ConfigError(name, "must be a non-empty list of model names")
    return tuple(value)


def _model_names(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(model, str) and model for model in value
    ):
        raise ConfigError(name, "must be a list of model names")
    return tuple(value)


def _optional_model_names(name: str, value: Any) -> tuple[str, ...] | None:
    return None if value is None else _model_names(name, value)


def _optional_object(name: str, value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ConfigError(name, "must be a JSON object or null")
    return value


_VALIDATORS = {
    "mode": _choice(MODES),
    "delay_ms": _int_between(0, int(HANG_CAP_SECONDS * 1000)),
    "chunk_delay_ms": _int_between(0, int(HANG_CAP_SECONDS * 1000)),
    "jitter_ms": _int_between(0, int(HANG_CAP_SECONDS * 1000)),
    "after_chunks": _int_between(0, MAX_CHUNKS),
    "cut_after_bytes": _int_between(0, MAX_BODY_BYTES),
    "status": _int_between(400, 599),
    "retry_after": _header_value,
    "error_rate": _rate,
    "scope": _choice(SCOPES),
    "text": _text,
    "models": _models,
    "api_key": _optional_string,
    "echo_key": _flag,
    "tool_arguments": _optional_object,
    "tool_name": _optional_string,
    "thinking_models": _model_names,
    "signature_key": _non_empty_string,
    "vision_models": _optional_model_names,
    "describe_images": _flag,
    "tool_models": _optional_model_names,
    "embedding_models": _model_names,
    "context_length": _int_between(1, 10_000_000),
    "embedding_dimensions": _int_between(1, MAX_EMBEDDING_DIMENSIONS),
    "disobey": _choice(DISOBEY),
    "load_ms": _int_between(0, int(HANG_CAP_SECONDS * 1000)),
    "content_encoding": _choice(CONTENT_ENCODINGS),
    "piece_chars": _int_between(0, MAX_CHUNKS),
}
