"""The components of the API's OpenAPI document (`edge/api/openapi.py`): each request body's
and each answer's JSON Schema, from beside the code that reads or builds it."""

from __future__ import annotations

from typing import Any

from edge.api.anthropic.request import count_body_schema, messages_body_schema
from edge.api.anthropic.schemas import ERROR_SCHEMA as ANTHROPIC_ERROR_SCHEMA
from edge.api.anthropic.schemas import MESSAGE_SCHEMA, TOKEN_COUNT_SCHEMA
from edge.api.anthropic.schemas import stream_event_schema as message_event_schema
from edge.api.complete.endpoint import ANSWER_SCHEMA
from edge.api.complete.request import complete_body_schema
from edge.api.json_body import ERROR_SCHEMA
from edge.api.openai.chat_request import chat_body_schema
from edge.api.openai.embeddings import EMBEDDINGS_SCHEMA
from edge.api.openai.embeddings_request import embeddings_body_schema
from edge.api.openai.models import MODEL_SCHEMA, MODELS_SCHEMA
from edge.api.openai.responses_request import responses_body_schema
from edge.api.openai.responses_schemas import RESPONSE_SCHEMA
from edge.api.openai.responses_schemas import stream_event_schema as response_event_schema
from edge.api.openai.shapes import CHUNK_SCHEMA, COMPLETION_SCHEMA, stream_event_schema
from edge.api.openai.shapes import ERROR_SCHEMA as OPENAI_ERROR_SCHEMA
from edge.api.status import STATUS_SCHEMA
from edge.probes import HEALTHZ_SCHEMA, READYZ_SCHEMA


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def components() -> dict[str, Any]:
    return {
        "CompleteRequest": complete_body_schema(),
        "CompleteAnswer": ANSWER_SCHEMA,
        "Error": ERROR_SCHEMA,
        "ChatCompletionRequest": chat_body_schema(),
        "ChatCompletion": COMPLETION_SCHEMA,
        "ChatCompletionChunk": CHUNK_SCHEMA,
        "ChatStreamEvent": stream_event_schema(ref("ChatCompletionChunk"), ref("OpenAIError")),
        "ResponseRequest": responses_body_schema(),
        "Response": RESPONSE_SCHEMA,
        "ResponseStreamEvent": response_event_schema(ref("Response")),
        "OpenAIError": OPENAI_ERROR_SCHEMA,
        "ModelList": MODELS_SCHEMA,
        "Model": MODEL_SCHEMA,
        "EmbeddingsRequest": embeddings_body_schema(),
        "Embeddings": EMBEDDINGS_SCHEMA,
        "Status": STATUS_SCHEMA,
        "MessageRequest": messages_body_schema(),
        "Message": MESSAGE_SCHEMA,
        "MessageStreamEvent": message_event_schema(),
        "CountTokensRequest": count_body_schema(),
        "TokenCount": TOKEN_COUNT_SCHEMA,
        "AnthropicError": ANTHROPIC_ERROR_SCHEMA,
        "Healthz": HEALTHZ_SCHEMA,
        "Readyz": READYZ_SCHEMA,
    }
