"""The JSON Schemas of the Responses API's answers (the schemas of `/api/openapi.json`): the
Response object, its output items, and the typed events of a stream, each a subset of OpenAI's
own (`Response`, `ResponseStreamEvent` and its members) plus the gateway's `failover` object.
The answers themselves are `edge/api/openai/responses_shapes.py`."""

from __future__ import annotations

from edge.api.fields import JsonSchema
from edge.api.openai.shapes import FAILOVER_SCHEMA, NULLABLE_STRING

STATUSES = ["completed", "incomplete", "in_progress"]
INTEGER: JsonSchema = {"type": "integer", "minimum": 0}
STRING: JsonSchema = {"type": "string"}
NO_ITEMS: JsonSchema = {"type": "array", "maxItems": 0}


def _object(**properties: JsonSchema) -> JsonSchema:
    """An object with each of `properties`."""
    return {"type": "object", "required": list(properties), "properties": properties}


OUTPUT_TEXT_SCHEMA = _object(
    type={"const": "output_text"}, text=STRING, annotations=NO_ITEMS, logprobs=NO_ITEMS
)
MESSAGE_SCHEMA = _object(
    type={"const": "message"},
    id={"type": "string", "pattern": "^msg_"},
    status={"enum": STATUSES},
    role={"const": "assistant"},
    content={"type": "array", "items": OUTPUT_TEXT_SCHEMA},
)
FUNCTION_CALL_SCHEMA = _object(
    type={"const": "function_call"},
    id={"type": "string", "pattern": "^fc_"},
    call_id=STRING,
    name=STRING,
    arguments={"type": "string", "description": "JSON text."},
    status={"enum": STATUSES},
)
SUMMARY_TEXT_SCHEMA = _object(type={"const": "summary_text"}, text=STRING)
REASONING_SCHEMA = _object(
    type={"const": "reasoning"},
    id={"type": "string", "pattern": "^rs_"},
    summary={"type": "array", "items": SUMMARY_TEXT_SCHEMA},
    status={"enum": STATUSES},
)
CUSTOM_TOOL_CALL_SCHEMA = _object(
    type={"const": "custom_tool_call"},
    id={"type": "string", "pattern": "^ctc_"},
    call_id=STRING,
    name=STRING,
    input={"type": "string", "description": "The custom tool's free-text input."},
)
OUTPUT_ITEM_SCHEMA: JsonSchema = {
    "anyOf": [REASONING_SCHEMA, MESSAGE_SCHEMA, FUNCTION_CALL_SCHEMA, CUSTOM_TOOL_CALL_SCHEMA]
}
USAGE_SCHEMA = _object(
    input_tokens=INTEGER,
    input_tokens_details=_object(cached_tokens=INTEGER, cache_write_tokens=INTEGER),
    output_tokens=INTEGER,
    output_tokens_details=_object(reasoning_tokens=INTEGER),
    total_tokens=INTEGER,
)
NULLABLE_NUMBER: JsonSchema = {"type": ["number", "null"]}
RESPONSE_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's Response object, with the gateway's failover object. In a "
    "stream's response.created and response.in_progress it has no output yet and no usage.",
    "required": [
        "id",
        "object",
        "created_at",
        "status",
        "error",
        "incomplete_details",
        "instructions",
        "model",
        "output",
        "parallel_tool_calls",
        "metadata",
        "tool_choice",
        "tools",
        "temperature",
        "top_p",
        "text",
        "failover",
    ],  # fmt: skip
    "properties": {
        "id": {"type": "string", "pattern": "^resp_"},
        "object": {"const": "response"},
        "created_at": {"type": "integer"},
        "completed_at": {"type": ["integer", "null"]},
        "status": {"enum": STATUSES},
        "error": {"type": "null"},
        "incomplete_details": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["reason"],
                    "properties": {"reason": {"const": "max_output_tokens"}},
                },
            ]
        },
        "instructions": NULLABLE_STRING,
        "max_output_tokens": {"type": ["integer", "null"]},
        "model": {"type": "string", "description": "The provider that answered, or the tier."},
        "output": {"type": "array", "items": OUTPUT_ITEM_SCHEMA},
        "parallel_tool_calls": {"type": "boolean"},
        "previous_response_id": {"type": "null"},
        "store": {"const": False, "description": "Nothing is stored."},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "temperature": NULLABLE_NUMBER,
        "top_p": NULLABLE_NUMBER,
        "text": {"type": "object", "required": ["format"]},
        "tool_choice": {
            "anyOf": [
                {"enum": ["none", "auto", "required"]},
                {
                    "type": "object",
                    "required": ["type", "name"],
                    "properties": {"type": {"const": "function"}, "name": {"type": "string"}},
                },
            ]
        },
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "name"]}},
        "truncation": {"const": "disabled"},
        "reasoning": {
            "type": "object",
            "description": "The request's reasoning setting, when it sent one.",
        },
        "usage": USAGE_SCHEMA,
        "failover": FAILOVER_SCHEMA,
    },
}


def _event_schema(kind: str, **properties: JsonSchema) -> JsonSchema:
    return {
        "type": "object",
        "required": ["type", "sequence_number", *properties],
        "properties": {"type": {"const": kind}, "sequence_number": INTEGER, **properties},
    }


_AT = {"item_id": STRING, "output_index": INTEGER}
_PART = {**_AT, "content_index": INTEGER}
ERROR_EVENT_SCHEMA = _event_schema(
    "error", code=NULLABLE_STRING, message=STRING, param=NULLABLE_STRING
)


def stream_event_schema(response: JsonSchema) -> JsonSchema:
    """One server-sent event of a stream, `event: <type>` beside its JSON `data`, whose
    response events carry `response` (a $ref to the Response object's schema). A stream ends
    with response.completed or response.incomplete, or, broken, with an error event."""
    events = [
        *(
            _event_schema(f"response.{kind}", response=response)
            for kind in ("created", "in_progress", "completed", "incomplete")
        ),
        *(
            _event_schema(
                f"response.output_item.{kind}", output_index=INTEGER, item=OUTPUT_ITEM_SCHEMA
            )
            for kind in ("added", "done")
        ),
        *(
            _event_schema(f"response.content_part.{kind}", **_PART, part=OUTPUT_TEXT_SCHEMA)
            for kind in ("added", "done")
        ),
        *(
            _event_schema(
                f"response.reasoning_summary_part.{kind}",
                **_AT,
                summary_index=INTEGER,
                part=SUMMARY_TEXT_SCHEMA,
            )
            for kind in ("added", "done")
        ),
        _event_schema(
            "response.reasoning_summary_text.delta", **_AT, summary_index=INTEGER, delta=STRING
        ),
        _event_schema(
            "response.reasoning_summary_text.done", **_AT, summary_index=INTEGER, text=STRING
        ),
        _event_schema("response.output_text.delta", **_PART, delta=STRING, logprobs=NO_ITEMS),
        _event_schema("response.output_text.done", **_PART, text=STRING, logprobs=NO_ITEMS),
        _event_schema("response.function_call_arguments.delta", **_AT, delta=STRING),
        _event_schema("response.custom_tool_call_input.delta", **_AT, delta=STRING),
        _event_schema("response.custom_tool_call_input.done", **_AT, input=STRING),
        _event_schema(
            "response.function_call_arguments.done", **_AT, name=STRING, arguments=STRING
        ),
        ERROR_EVENT_SCHEMA,
    ]
    return typed_events(events)


def typed_events(events: list[JsonSchema]) -> JsonSchema:
    """A server-sent event that is one of `events`, each a JSON object whose `type` names it,
    sent as `event: <type>` beside its JSON `data`."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": [event["properties"]["type"]["const"] for event in events]},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"anyOf": events},
            },
        },
    }
