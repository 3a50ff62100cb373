"""The OpenAI-compatible answers in OpenAI's shapes, each beside its JSON Schema (the schemas of
`/api/openapi.json`): the error, the `chat.completion`, the `chat.completion.chunk`s of a
stream and the event that ends a broken one.

Every shape is a subset of OpenAI's own (`CreateChatCompletionResponse`,
`CreateChatCompletionStreamResponse`, `ErrorResponse`) plus the gateway's `failover` object.
"""

from __future__ import annotations

import time
from typing import Any

from edge.api.fields import JsonSchema
from edge.api.json_body import ApiError
from edge.api.openai.chat_request import ChatBody
from edge.api.pipeline import TIERS
from gateway.adapters.messages import Piece, Reasoning, ToolCall
from gateway.engine import codec
from gateway.routing.cascade import RouteResult

# OpenAI's error types, by status.
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(error: ApiError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(error.status) or (
        "invalid_request_error" if error.status < 500 else "server_error"
    )
    body = {"message": error.message, "type": kind, "param": error.field, "code": error.code}
    return {"error": body}


NULLABLE_STRING: JsonSchema = {"type": ["string", "null"]}
ERROR_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's error shape.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {
                    "type": "string",
                    "examples": ["invalid_request_error", "authentication_error"],
                },
                "param": {**NULLABLE_STRING, "description": "The field at fault, if one is."},
                "code": NULLABLE_STRING,
            },
        }
    },
}

FINISH_REASONS = ["stop", "length", "tool_calls"]
TOOL_CALL_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}
TOOL_CALL_CHUNK_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["index"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "id": {"type": "string"},
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}
FAILOVER_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "Which tier answered, and why (the X-Failover-* headers say it too).",
    "required": ["tier", "provider", "is_fallback", "degradation_notice", "request_id"],
    "properties": {
        "tier": {"enum": list(TIERS)},
        "provider": NULLABLE_STRING,
        "is_fallback": {"type": "boolean"},
        "degradation_notice": NULLABLE_STRING,
        "request_id": {"type": "string"},
        "cached_age_s": {"type": ["integer", "null"], "minimum": 0},
    },
}
USAGE_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        name: {"type": "integer", "minimum": 0}
        for name in ("prompt_tokens", "completion_tokens", "total_tokens")
    },
}
_ANSWER: JsonSchema = {
    "id": {"type": "string", "pattern": "^chatcmpl-"},
    "created": {"type": "integer"},
    "model": {"type": "string", "description": "The provider that answered, or the tier."},
}
COMPLETION_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's chat.completion, with the gateway's failover object.",
    "required": ["id", "object", "created", "model", "choices", "usage", "failover"],
    "properties": {
        **_ANSWER,
        "object": {"const": "chat.completion"},
        "choices": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "required": ["index", "message", "logprobs", "finish_reason"],
                "properties": {
                    "index": {"const": 0},
                    "message": {
                        "type": "object",
                        "required": ["role", "content"],
                        "properties": {
                            "role": {"const": "assistant"},
                            "content": {
                                "type": ["string", "null"],
                                "description": "null when the answer is tool calls only.",
                            },
                            "refusal": {"type": "null"},
                            "tool_calls": {"type": "array", "items": TOOL_CALL_SCHEMA},
                            "reasoning_content": {
                                "type": "string",
                                "description": "The model's thinking, when it thought.",
                            },
                        },
                    },
                    "logprobs": {"type": "null"},
                    "finish_reason": {"enum": FINISH_REASONS},
                },
            },
        },
        "usage": USAGE_SCHEMA,
        "failover": FAILOVER_SCHEMA,
    },
}
CHUNK_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's chat.completion.chunk; the first carries the failover object, "
    "the last (with stream_options.include_usage) no choice and the usage.",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        **_ANSWER,
        "object": {"const": "chat.completion.chunk"},
        "choices": {
            "type": "array",
            "maxItems": 1,
            "items": {
                "type": "object",
                "required": ["index", "delta", "logprobs", "finish_reason"],
                "properties": {
                    "index": {"const": 0},
                    "delta": {
                        "type": "object",
                        "properties": {
                            "role": {"const": "assistant"},
                            "content": {"type": "string"},
                            "tool_calls": {"type": "array", "items": TOOL_CALL_CHUNK_SCHEMA},
                            "reasoning_content": {"type": "string"},
                        },
                    },
                    "logprobs": {"type": "null"},
                    "finish_reason": {"enum": [*FINISH_REASONS, None]},
                },
            },
        },
        "usage": {"anyOf": [{"type": "null"}, USAGE_SCHEMA]},
        "failover": FAILOVER_SCHEMA,
    },
}


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + codec.dumps(body) + b"\n\n"


DONE = b"data: [DONE]\n\n"
BROKEN = _event(
    error_body(
        ApiError(500, "stream_interrupted", "The provider's answer broke off; it is incomplete.")
    )
)


def stream_event_schema(chunk: JsonSchema, error: JsonSchema) -> JsonSchema:
    """One server-sent event of a stream: a chunk, the error that ends a broken stream, or
    `[DONE]`, which ends a whole one."""
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "if": {"const": "[DONE]"},
                "else": {
                    "contentMediaType": "application/json",
                    "contentSchema": {"anyOf": [chunk, error]},
                },
            }
        },
    }


def failover_object(result: RouteResult, request_id: str) -> dict[str, Any]:
    """Which tier answered, and why: the `failover` object of every OpenAI-shaped answer."""
    return {
        "tier": result.tier,
        "provider": result.provider or None,
        "is_fallback": result.is_fallback,
        "degradation_notice": result.degradation_notice,
        "request_id": request_id,
        "cached_age_s": result.cached_age_s,
    }


def tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def delta(piece: Piece) -> dict[str, Any]:
    """A stream chunk's delta for one piece: text, a piece of a tool call in OpenAI's
    streaming shape (the first piece of a call has its id, type and name), or of the model's
    thinking as `reasoning_content` (the field DeepSeek's and vLLM's APIs use)."""
    if isinstance(piece, str):
        return {"content": piece}
    if isinstance(piece, Reasoning):
        return {"reasoning_content": piece.text}
    call: dict[str, Any] = {"index": piece.index}
    if piece.id or piece.name:
        call["id"] = piece.id
        call["type"] = "function"
        call["function"] = {"name": piece.name, "arguments": piece.arguments}
    else:
        call["function"] = {"arguments": piece.arguments}
    return {"tool_calls": [call]}


class Shape:
    """The answer in OpenAI's words, whole or as stream chunks."""

    def __init__(self, parsed: ChatBody, result: RouteResult, request_id: str) -> None:
        self.parsed = parsed
        self.result = result
        self.id = f"chatcmpl-{request_id.replace('-', '')}"
        self.created = int(time.time())
        self.request_id = request_id
        # Who answered: the provider's name, or the tier that stood in for one.
        self.model = result.provider or result.tier

    def failover(self) -> dict[str, Any]:
        return failover_object(self.result, self.request_id)

    def usage(self) -> dict[str, int]:
        result = self.result
        return {
            "prompt_tokens": result.tokens_in,
            "completion_tokens": result.tokens_out,
            "total_tokens": result.tokens_in + result.tokens_out,
        }

    def _answer(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
        }

    def completion(self) -> dict[str, Any]:
        result = self.result
        message: dict[str, Any] = {"role": "assistant", "content": result.text, "refusal": None}
        if result.tool_calls:
            message["content"] = result.text or None
            message["tool_calls"] = [tool_call(call) for call in result.tool_calls]
        if result.reasoning:
            message["reasoning_content"] = result.reasoning
        return {
            **self._answer("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.result.finish_reason,
                }
            ],
            "usage": self.usage(),
            "failover": self.failover(),
        }

    def chunk(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        *,
        failover: bool = False,
    ) -> bytes:
        body: dict[str, Any] = {
            **self._answer("chat.completion.chunk"),
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.parsed.include_usage:
            body["usage"] = None
        if failover:
            body["failover"] = self.failover()
        return _event(body)

    def usage_chunk(self) -> bytes:
        return _event(
            {**self._answer("chat.completion.chunk"), "choices": [], "usage": self.usage()}
        )
