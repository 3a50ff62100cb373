"""Validation of the frontends' request bodies: each problem answered as a 4xx naming the field.

The bodies are tables of fields (`edge/api/fields.py`): the same tables are the bodies'
schemas in `/api/openapi.json`. `POST /api/v1/complete` is here, with the gateway's own fields
both endpoints take; the Chat Completions body is in `edge/api/chat_request.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge.api.fields import (
    BodyTable,
    Field,
    JsonSchema,
)
from edge.api.json_body import ApiError
from providers.models import TASK_NAME

MAX_PROMPT_CHARS = 32_000
MAX_SYSTEM_PROMPT_CHARS = 16_000
MAX_TOKENS_LIMIT = 32_768
MAX_USER_CHARS = 256


def max_tokens_field(name: str, description: str = "The longest answer, in tokens.") -> Field:
    return Field(
        name,
        "integer",
        description + " The provider's own limit when not sent.",
        minimum=1,
        maximum=MAX_TOKENS_LIMIT,
    )


TEMPERATURE = Field(
    "temperature",
    "number",
    "Sampling temperature; the provider's own when not sent.",
    minimum=0,
    maximum=2,
)

# The gateway's own fields, the same on both endpoints.
ROUTING_FIELDS = (
    Field(
        "priority",
        "string",
        'Past 85 % of a budget only "high" still reaches a paid provider (if the key\'s app '
        "may send it).",
        nullable=False,
        default="normal",
        enum=("normal", "high"),
    ),
    Field(
        "task",
        "string",
        "A label the policy can act on: local-only tasks never leave self-hosted providers; "
        "no-fallback tasks get a 503 instead of a static or degraded answer.",
        default="",
        pattern=TASK_NAME,
        pattern_message="'task' is up to 100 letters, digits, '.', '_' and '-', starting "
        "alphanumeric.",
    ),
    Field(
        "allow_cloud",
        "boolean",
        "false keeps the request on self-hosted providers; if they fail it gets the static "
        "tier, never the cloud.",
        nullable=False,
        default=True,
    ),
    Field(
        "cache",
        "boolean",
        "false: this answer is neither taken from nor saved to the answer cache.",
        nullable=False,
        default=True,
    ),
    Field(
        "user",
        "string",
        "The end user or session: the weighted strategy keeps the same user on the same provider.",
        default="",
        max_length=MAX_USER_CHARS,
    ),
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
