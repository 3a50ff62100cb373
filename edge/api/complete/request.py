"""The body of `POST /api/v1/complete`: one prompt (and a system prompt), the answer's limits,
and the gateway's own fields, as a table of fields that is also its schema in
`/api/openapi.json`; any other field is refused."""

from __future__ import annotations

from dataclasses import dataclass

from edge.api.fields import BodyTable, Field, JsonSchema
from edge.api.json_body import ApiError
from edge.api.validation import (
    MAX_PROMPT_CHARS,
    MAX_SYSTEM_PROMPT_CHARS,
    ROUTING_FIELDS,
    TEMPERATURE,
    max_tokens_field,
)

COMPLETE_FIELDS = (
    Field(
        "prompt",
        "string",
        "The question or instruction.",
        required=True,
        not_blank=True,
        max_length=MAX_PROMPT_CHARS,
        examples=("What are your opening hours?",),
    ),
    Field(
        "system_prompt",
        "string",
        "Sent first, as the system message.",
        default="",
        max_length=MAX_SYSTEM_PROMPT_CHARS,
    ),
    max_tokens_field("max_tokens"),
    TEMPERATURE,
    *ROUTING_FIELDS,
)
COMPLETE_BODY = BodyTable(COMPLETE_FIELDS, unknown="Unknown field '{name}'.")


@dataclass(frozen=True, slots=True)
class CompleteBody:
    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


def parse_complete(raw: bytes) -> CompleteBody | ApiError:
    values = COMPLETE_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    return CompleteBody(**values)


def complete_body_schema() -> JsonSchema:
    return COMPLETE_BODY.schema("One prompt in; any field not listed here is refused.")
