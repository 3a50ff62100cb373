"""The frontends' endpoint: `POST /api/v1/complete`, one prompt in, one answer out.

Errors are JSON, `{"error": {"code", "message", "field"?}}` (`edge.api.arrival`).
"""

from __future__ import annotations

import time
from typing import Any

from django.http import HttpRequest

from edge.api.arrival import Arrival, arrived, error_response, json_errors
from edge.api.complete.request import parse_complete
from edge.api.fields import JsonSchema
from edge.api.json_answer import JsonAnswer
from edge.api.pipeline import TIERS, failover_headers, route_request, route_safely
from edge.api.turned_away import refused
from gateway.adapters.messages import CompletionRequest
from runtime.outcomes import record_call

ANSWER_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "The answer, and which tier gave it.",
    "required": [
        "text",
        "provider",
        "tier",
        "is_fallback",
        "degradation_notice",
        "request_id",
        "latency_ms",
        "tokens_in",
        "tokens_out",
    ],
    "properties": {
        "text": {"type": "string"},
        "provider": {"type": ["string", "null"], "description": "null when no provider answered."},
        "tier": {"enum": list(TIERS)},
        "is_fallback": {"type": "boolean"},
        "degradation_notice": {"type": ["string", "null"]},
        "request_id": {"type": "string"},
        "latency_ms": {"type": "integer", "minimum": 0},
        "tokens_in": {"type": "integer", "minimum": 0},
        "tokens_out": {"type": "integer", "minimum": 0},
    },
}


@json_errors
async def complete(request: HttpRequest) -> JsonAnswer:
    started = time.perf_counter()
    arrival = await arrived(
        request, parse_complete, wrong_method_message="Use POST with a JSON body."
    )
    if not isinstance(arrival, Arrival):
        return arrival
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    refusal = arrival.forbidden(priority=parsed.priority)
    if refusal is not None:
        return refused(refusal, error_response, request, caller, arrival.body)

    routed = route_request(
        parsed,
        CompletionRequest(
            prompt=parsed.prompt,
            system_prompt=parsed.system_prompt,
            max_tokens=parsed.max_tokens,
            temperature=parsed.temperature,
        ),
        caller,
        arrival.rate,
    )
    request_id = routed.request_id
    result = await route_safely(routed, gateway)
    latency_ms = round((time.perf_counter() - started) * 1000)
    record_call(gateway, routed, result, latency_ms)

    headers = failover_headers(result, request_id)
    if result.error is not None:
        body: dict[str, Any] = {"error": {**result.error.as_body(), "request_id": request_id}}
        return JsonAnswer(body, status=result.status, headers=headers)
    return JsonAnswer(
        {
            "text": result.text,
            "provider": result.provider or None,
            "tier": result.tier,
            "is_fallback": result.is_fallback,
            "degradation_notice": result.degradation_notice,
            "request_id": request_id,
            "latency_ms": latency_ms,
            "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out,
        },
        status=result.status,
        headers=headers,
    )
