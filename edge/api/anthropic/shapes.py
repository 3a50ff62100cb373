"""Answers in Anthropic's Messages shapes: a message (text and tool_use blocks, its stop
reason and usage), its typed stream events, and Anthropic's error shape.

A stream is `message_start` (with a `ping` after it), then each content block as
`content_block_start`, its deltas and `content_block_stop`, then `message_delta` (the stop
reason and the usage) and `message_stop`. None of it is sent before the answer's first piece
is here (the router waits for it), so a request no provider can answer gets a clean error
status, fallback included. A provider that breaks off mid-stream ends it with an `error` event;
nothing from another provider is spliced in. Every message also carries the gateway's
`failover` object, as the OpenAI-shaped answers do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.openai.shapes import failover_object
from gateway.adapters.messages import Piece, Reasoning, ToolCall, ToolCallDelta
from gateway.engine import codec
from gateway.routing.result import RouteResult

# The chat endpoint's finish reasons (`gateway.routing.streams.finish_reason`) in Anthropic's.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
# Anthropic's error types by HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(error: ApiError) -> dict[str, Any]:
    """Anthropic's error shape; a problem with one field names its path first, as Anthropic's
    own messages do (`messages.3.role: ...`)."""
    message = error.message
    if error.field and not message.startswith(error.field):
        message = f"{error.field}: {message}"
    return {"type": "error", "error": {"type": error_type(error.status), "message": message}}


def anthropic_error(error: ApiError) -> JsonAnswer:
    return JsonAnswer(anthropic_error_body(error), status=error.status)


def _event(kind: str, body: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + codec.dumps({"type": kind, **body}) + b"\n\n"


BROKEN = _event(
    "error",
    {
        "error": {
            "type": "api_error",
            "message": "The provider's answer broke off; it is incomplete.",
        }
    },
)
PING = _event("ping", {})


def tool_use_id(call_id: str) -> str:
    """A call's id as Anthropic spells them (`toolu_…`), whoever made it; a client sends it
    back as it got it, and every dialect takes it so."""
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id}"


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments (JSON text) as the object Anthropic's tool_use block holds."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessageShape:
    """The answer in Anthropic's words, whole or as stream events."""

    def __init__(self, result: RouteResult, request_id: str, *, thinking: bool = False) -> None:
        self.result = result
        self.thinking = thinking  # the caller asked for thinking: what the model thought is given
        self.id = f"msg_{request_id.replace('-', '')}"
        self.request_id = request_id
        # Who answered: the provider's name, or the tier that stood in for one.
        self.model = result.provider or result.tier

    def envelope(self) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def usage(self) -> dict[str, int]:
        return {"input_tokens": self.result.tokens_in, "output_tokens": self.result.tokens_out}

    def stop_reason(self) -> str:
        return STOP_REASONS.get(self.result.finish_reason, "end_turn")

    def message(self) -> dict[str, Any]:
        result = self.result
        content: list[dict[str, Any]] = []
        if self.thinking and result.reasoning:
            content.append(
                {
                    "type": "thinking",
                    "thinking": result.reasoning,
                    "signature": result.reasoning_signature,
                }
            )
        if result.text:
            content.append({"type": "text", "text": result.text})
        content += [
            {
                "type": "tool_use",
                "id": tool_use_id(call.id),
                "name": call.name,
                "input": tool_input(call),
            }
            for call in result.tool_calls
        ]
        return {
            **self.envelope(),
            "content": content,
            "stop_reason": self.stop_reason(),
            "stop_sequence": None,
            "usage": self.usage(),
            "failover": failover_object(result, self.request_id),
        }


class MessageEvents:
    """A stream's events (`edge.api.pipeline.Frames`): one content block at a time, a
    thinking block for the model's thinking (when the caller asked for it; its signature last,
    as Anthropic sends it), a text block for text, a tool_use block for each call."""

    def __init__(self, shape: MessageShape) -> None:
        self.shape = shape
        self.index = -1  # the open block's, -1 before the first
        self.open = ""  # the open block's type, "" when none is

    def opening(self) -> Iterable[bytes]:
        shape = self.shape
        message = {
            **shape.envelope(),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": shape.result.tokens_in, "output_tokens": 0},
            "failover": failover_object(shape.result, shape.request_id),
        }
        return [_event("message_start", {"message": message}), PING]

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        events = self._stop()
        self.index += 1
        self.open = block["type"]
        events.append(_event("content_block_start", {"index": self.index, "content_block": block}))
        return events

    def _stop(self) -> list[bytes]:
        if not self.open:
            return []
        events = []
        if self.open == "thinking":
            stream = self.shape.result.stream
            signature = stream.reasoning_signature if stream is not None else ""
            delta = {"type": "signature_delta", "signature": signature}
            events.append(_event("content_block_delta", {"index": self.index, "delta": delta}))
        self.open = ""
        events.append(_event("content_block_stop", {"index": self.index}))
        return events

    def piece(self, piece: Piece) -> Iterable[bytes]:
        if isinstance(piece, Reasoning):
            if not self.shape.thinking or not piece.text:
                return []
            events = (
                []
                if self.open == "thinking"
                else self._start({"type": "thinking", "thinking": "", "signature": ""})
            )
            delta = {"type": "thinking_delta", "thinking": piece.text}
            events.append(_event("content_block_delta", {"index": self.index, "delta": delta}))
            return events
        if isinstance(piece, str):
            if not piece:
                return []
            events = [] if self.open == "text" else self._start({"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": piece}
        else:
            assert isinstance(piece, ToolCallDelta)
            events = []
            if piece.id or piece.name or self.open != "tool_use":
                block = {
                    "type": "tool_use",
                    "id": tool_use_id(piece.id),
                    "name": piece.name,
                    "input": {},
                }
                events = self._start(block)
            if not piece.arguments:
                return events
            delta = {"type": "input_json_delta", "partial_json": piece.arguments}
        events.append(_event("content_block_delta", {"index": self.index, "delta": delta}))
        return events

    def broken(self) -> bytes:
        return BROKEN

    def closing(self, result: RouteResult) -> Iterable[bytes]:
        shape = self.shape
        shape.result = result  # the stream's result as it ended: its finish and usage
        return [
            *self._stop(),
            _event(
                "message_delta",
                {
                    "delta": {"stop_reason": shape.stop_reason(), "stop_sequence": None},
                    "usage": shape.usage(),
                },
            ),
            _event("message_stop", {}),
        ]
