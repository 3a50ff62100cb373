"""The body of `POST /v1/embeddings`, as a table of fields (`edge/api/fields.py`) that is
also its schema in `/api/openapi.json`: OpenAI's embeddings request, text inputs only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.api.fields import (
    NOT_BLANK,
    BodyTable,
    Field,
    JsonSchema,
    invalid,
)
from edge.api.json_body import ApiError
from edge.api.validation import ROUTING_FIELDS

MAX_INPUTS = 2048  # OpenAI's own limit on one request's inputs
MAX_DIMENSIONS = 16_384


def _inputs(value: Any, body: dict[str, Any]) -> Any:
    """The texts to embed: one string, or a list of them. Token arrays (lists of integers) are
    refused: the providers behind the gateway don't share one tokenizer."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        return invalid("input", "'input' must be a string or a non-empty list of strings.")
    if len(texts) > MAX_INPUTS:
        return invalid("input", f"'input' may hold at most {MAX_INPUTS} texts.")
    if any(isinstance(text, int | list) for text in texts):
        return ApiError(
            400,
            "unsupported_parameter",
            "Token arrays are not supported: send the text (the providers here tokenize "
            "differently).",
            "input",
        )
    if not all(isinstance(text, str) and text.strip() for text in texts):
        return invalid("input", "Each input must be a non-empty string.")
    return tuple(texts)


EMBEDDINGS_FIELDS = (
    Field(
        "model",
        "string",
        '"auto" (every provider that embeds, each with its first embedding model), an '
        "embedding model's name (the providers that serve it) or a provider's name.",
        required=True,
        min_length=1,
        message="'model' is required: \"auto\", an embedding model or a provider's name.",
        examples=("auto",),
    ),
    Field(
        "input",
        "any",
        f"A text, or a list of up to {MAX_INPUTS} texts (no token arrays).",
        required=True,
        parse=_inputs,
        fragment={
            "anyOf": [
                {"type": "string", "pattern": NOT_BLANK},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_INPUTS,
                    "items": {"type": "string", "pattern": NOT_BLANK},
                },
            ]
        },
        examples=("What are your opening hours?",),
    ),
    Field(
        "encoding_format",
        "string",
        "float (lists of numbers) or base64 (little-endian float32).",
        default="float",
        enum=("float", "base64"),
    ),
    Field(
        "dimensions",
        "integer",
        "The vectors' length, for models that can shorten them.",
        minimum=1,
        maximum=MAX_DIMENSIONS,
    ),
    *ROUTING_FIELDS,
)
EMBEDDINGS_BODY = BodyTable(EMBEDDINGS_FIELDS)


@dataclass(frozen=True, slots=True)
class EmbeddingsBody:
    model: str
    inputs: tuple[str, ...]
    encoding: str = "float"
    dimensions: int | None = None
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


def parse_embeddings(raw: bytes) -> EmbeddingsBody | ApiError:
    values = EMBEDDINGS_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    return EmbeddingsBody(
        model=values["model"],
        inputs=values["input"],
        encoding=values["encoding_format"],
        dimensions=values["dimensions"],
        **{field.name: values[field.name] for field in ROUTING_FIELDS},
    )


def embeddings_body_schema() -> JsonSchema:
    return EMBEDDINGS_BODY.schema(
        "An embeddings request; an unknown field is refused as OpenAI refuses it."
    )
