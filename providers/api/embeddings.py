"""`POST /v1/embeddings`: OpenAI's embeddings endpoint, routed through the providers that embed.

`model` is "auto" (every provider whose row names an embedding model, by priority, each with
its first), an embedding model's name (the providers that serve it, by priority) or a
provider's name (its first embedding model). Each attempt goes through the same admission as a
chat (breaker, health, budgets, in-flight limit), the same error table, the same ledger.
No cached or prepared answer stands in for a vector: when no provider answers, a 503 in
OpenAI's error shape. The gateway asks every upstream for floats and encodes base64 itself.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from failover_site.runtime.outcomes import record_call
from providers.adapters.messages import CompletionRequest
from providers.api.access import permitted
from providers.api.common import (
    Refusal,
    caller_admitted,
    failover_headers,
    refused,
    route_request,
    route_safely,
)
from providers.api.embeddings_request import EmbeddingsBody, parse_embeddings
from providers.api.fields import JsonSchema
from providers.api.json_body import ApiError
from providers.api.openai_common import (
    arrived,
    ms_since,
    openai_error,
    openai_json_errors,
    routed_error,
)
from providers.api.openai_shapes import FAILOVER_SCHEMA, failover_object
from providers.engine.config import Snapshot

AUTO_MODEL = "auto"


def embedding_group(snapshot: Snapshot, name: str) -> tuple[tuple[str, str], ...] | None:
    """The (provider, model) entries `name` asks for, by priority; None when no enabled
    provider embeds with it (a 404: the configuration's answer, not an outage's)."""
    embedders = [p for p in snapshot.providers if p.embedding_models]
    by_name = snapshot.provider(name)
    if name == AUTO_MODEL:
        group = tuple((p.name, p.embedding_models[0]) for p in embedders)
    elif by_name is not None:
        group = ((name, by_name.embedding_models[0]),) if by_name.embedding_models else ()
    else:
        group = tuple((p.name, name) for p in embedders if name in p.embedding_models)
    return group or None


@openai_json_errors
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    arrival = await arrived(request, parse_embeddings)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    snapshot = await gateway.snapshots.current()
    group = embedding_group(snapshot, parsed.model)
    if group is None:
        return openai_error(
            ApiError(
                404,
                "model_not_found",
                f"No provider here embeds with '{parsed.model}': use \"auto\", a provider's "
                "name or an embedding model one of them serves (a provider row's embedding "
                "models).",
                "model",
            )
        )
    for provider, _ in group if parsed.model != AUTO_MODEL else ():
        refusal = permitted(caller, prefer=provider)
        if refusal is not None:
            return refused(refusal, openai_error)
    ticket = await caller_admitted(caller, gateway, priority=parsed.priority)
    if isinstance(ticket, Refusal):
        return refused(ticket, openai_error)
    routed = route_request(
        parsed,
        CompletionRequest(
            prompt="\n".join(parsed.inputs),
            embed=parsed.inputs,
            dimensions=parsed.dimensions,
            options=(("user", parsed.user),) if parsed.user else (),
        ),
        caller,
        ticket,
        group=group,
        then_cascade=False,
    )
    result = await route_safely(routed, gateway)
    record_call(gateway, routed, result, ms_since(started))
    headers = failover_headers(result, routed.request_id)
    if result.error is not None:
        return routed_error(result, headers)
    return JsonResponse(_body(parsed, result, routed.request_id), headers=headers)


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
