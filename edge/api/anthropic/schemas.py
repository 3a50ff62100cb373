"""The JSON Schemas of what `POST /v1/messages` and `/v1/messages/count_tokens` answer
(`edge/api/anthropic/shapes.py` builds it): the message, each stream event, Anthropic's error
shape and the token count, for the API's OpenAPI document (`edge/api/openapi.py`)."""

from __future__ import annotations

from edge.api.anthropic.shapes import ERROR_TYPES, STOP_REASONS
from edge.api.fields import JsonSchema
from edge.api.openai.responses_schemas import INTEGER as COUNT
from edge.api.openai.responses_schemas import STRING, typed_events
from edge.api.openai.shapes import FAILOVER_SCHEMA

TEXT_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": STRING},
}
TOOL_USE_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type", "id", "name", "input"],
    "properties": {
        "type": {"const": "tool_use"},
        "id": STRING,
        "name": STRING,
        "input": {"type": "object"},
    },
}
USAGE: JsonSchema = {
    "type": "object",
    "required": ["input_tokens", "output_tokens"],
    "properties": {"input_tokens": COUNT, "output_tokens": COUNT},
}
STOP_REASON: JsonSchema = {"enum": sorted(set(STOP_REASONS.values()))}


def _message(stop_reason: JsonSchema) -> JsonSchema:
    return {
        "type": "object",
        "description": "A message in Anthropic's shape; model names who answered (a provider, "
        "or the tier that stood in), failover says which tier and why.",
        "required": [
            "id",
            "type",
            "role",
            "model",
            "content",
            "stop_reason",
            "stop_sequence",
            "usage",
        ],  # fmt: skip
        "properties": {
            "id": {"type": "string", "pattern": "^msg_"},
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "model": STRING,
            "content": {"type": "array", "items": {"anyOf": [TEXT_BLOCK, TOOL_USE_BLOCK]}},
            "stop_reason": stop_reason,
            "stop_sequence": {"type": ["string", "null"]},
            "usage": USAGE,
            "failover": FAILOVER_SCHEMA,
        },
    }


MESSAGE_SCHEMA = _message(STOP_REASON)
ERROR_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "Anthropic's error shape.",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"enum": sorted({*ERROR_TYPES.values(), "api_error"})},
                "message": STRING,
            },
        },
    },
}
TOKEN_COUNT_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["input_tokens"],
    "properties": {"input_tokens": COUNT},
}


def _event(kind: str, **properties: JsonSchema) -> JsonSchema:
    return {
        "type": "object",
        "required": ["type", *properties],
        "properties": {"type": {"const": kind}, **properties},
    }


INDEX = {"index": COUNT}
DELTAS: JsonSchema = {
    "anyOf": [
        {
            "type": "object",
            "required": ["type", "text"],
            "properties": {"type": {"const": "text_delta"}, "text": STRING},
        },
        {
            "type": "object",
            "required": ["type", "partial_json"],
            "properties": {"type": {"const": "input_json_delta"}, "partial_json": STRING},
        },
    ]
}


def stream_event_schema() -> JsonSchema:
    """One server-sent event of a stream, `event: <type>` beside its JSON: the message's start
    (a message with no content yet and no stop reason), a ping, each content block's start,
    deltas and stop, the message's delta and stop; a broken stream ends with an error."""
    events = [
        _event("message_start", message=_message({"type": "null"})),
        _event("ping"),
        _event(
            "content_block_start", **INDEX, content_block={"anyOf": [TEXT_BLOCK, TOOL_USE_BLOCK]}
        ),
        _event("content_block_delta", **INDEX, delta=DELTAS),
        _event("content_block_stop", **INDEX),
        _event(
            "message_delta",
            delta={
                "type": "object",
                "required": ["stop_reason", "stop_sequence"],
                "properties": {"stop_reason": STOP_REASON, "stop_sequence": {"type": "null"}},
            },
            usage=USAGE,
        ),
        _event("message_stop"),
        _event("error", error=ERROR_SCHEMA["properties"]["error"]),
    ]
    return typed_events(events)
