"""`POST /v1/embeddings`: OpenAI's embeddings endpoint, routed through the providers that embed.

`model` is read by `edge.api.models.resolve_model` for embeddings: "auto" (every provider
whose row names an embedding model, by priority, each with its first), a provider's name (its
first embedding model) or an embedding model's name (the providers that serve it, by priority);
never on to another embedding model, whose vectors wouldn't compare. Each attempt goes through
the same admission as a chat (breaker, health, budgets, in-flight limit), the same error table,
the same ledger. No cached or prepared answer stands in for a vector: when no provider answers,
a 503 in OpenAI's error shape. The gateway asks every upstream for floats and encodes base64
itself.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from edge.api.fields import JsonSchema
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.models import Purpose, resolve_model
from edge.api.openai.embeddings_request import EmbeddingsBody, parse_embeddings
from edge.api.openai.errors import arrived, openai_error, openai_json_errors
from edge.api.openai.shapes import FAILOVER_SCHEMA, failover_object
from edge.api.pipeline import (
    failover_headers,
    ms_since,
    route_request,
    route_safely,
    routed_error,
)
from edge.api.turned_away import refused
from gateway.adapters.messages import CompletionRequest
from runtime.outcomes import record_call


@openai_json_errors
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    arrival = await arrived(request, parse_embeddings)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    snapshot = await gateway.snapshots.current()
    choice = resolve_model(caller, snapshot, parsed.model, Purpose.EMBED)
    if isinstance(choice, ApiError):
        return refused(choice, openai_error, request, caller, arrival.body)
    refusal = arrival.forbidden(priority=parsed.priority)
    if refusal is not None:
        return refused(refusal, openai_error, request, caller, arrival.body)
    routed = route_request(
        parsed,
        CompletionRequest(
            prompt="\n".join(parsed.inputs),
            embed=parsed.inputs,
            dimensions=parsed.dimensions,
            options=(("user", parsed.user),) if parsed.user else (),
        ),
        caller,
        arrival.rate,
        group=choice.group,
        then_cascade=choice.then_cascade,
    )
    result = await route_safely(routed, gateway)
    record_call(gateway, routed, result, ms_since(started))
    headers = failover_headers(result, routed.request_id)
    if result.error is not None:
        return routed_error(result, headers, openai_error)
    return JsonAnswer(_body(parsed, result, routed.request_id), headers=headers)


def _encoded(vector: tuple[float, ...], encoding: str) -> list[float] | str:
    if encoding == "base64":  # little-endian float32, as OpenAI sends it
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return list(vector)


def _body(parsed: EmbeddingsBody, result: Any, request_id: str) -> dict[str, Any]:
    model = next(
        (a.model for a in result.attempts if a.outcome == "ok" and a.provider == result.provider),
        result.provider,
    )
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": _encoded(vector, parsed.encoding)}
            for index, vector in enumerate(result.embeddings)
        ],
        "model": model,
        "usage": {"prompt_tokens": result.tokens_in, "total_tokens": result.tokens_in},
        "failover": failover_object(result, request_id),
    }


EMBEDDINGS_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "OpenAI's embedding list, with the gateway's failover object.",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["object", "index", "embedding"],
                "properties": {
                    "object": {"const": "embedding"},
                    "index": {"type": "integer", "minimum": 0},
                    "embedding": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}},
                            {"type": "string", "description": "base64 float32 (LE)"},
                        ]
                    },
                },
            },
        },
        "model": {"type": "string", "description": "The upstream embedding model."},
        "usage": {
            "type": "object",
            "required": ["prompt_tokens", "total_tokens"],
            "properties": {
                "prompt_tokens": {"type": "integer", "minimum": 0},
                "total_tokens": {"type": "integer", "minimum": 0},
            },
        },
        "failover": FAILOVER_SCHEMA,
    },
}
