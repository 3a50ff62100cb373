"""The fields every door's body shares: the gateway's own (`ROUTING_FIELDS`: priority, task,
allow_cloud, cache, user), the sampling temperature and the answer's token limit, and the size
limits of the gateway's own door. Each door's body is a table of fields (`edge/api/fields.py`)
that is also its schema in `/api/openapi.json`: `edge/api/complete/request.py`,
`edge/api/openai/chat_request.py`, `edge/api/anthropic/request.py` and the others beside them.
"""

from __future__ import annotations

from edge.api.fields import (
    Field,
)
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
