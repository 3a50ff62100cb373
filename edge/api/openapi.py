"""`GET /api/openapi.json`: the OpenAPI 3.1 document of the gateway's own endpoints.

Built once per process from what the endpoints themselves use: the request bodies from their
field tables (`edge/api/validation.py`, `edge/api/openai/chat_request.py`), each answer's
JSON Schema from beside the code that builds it, the statuses from the refusals the endpoints
can give. So the document can't promise what the code doesn't do; the suite holds the two
together (`tests/providers/test_openapi.py`, Schemathesis against the running app). It is the
API's public description and needs no key.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from edge.api.arrival import (
    body_limit_for,
    byte_size,
    checked_host,
    error_response,
    json_errors,
    wrong_method,
)
from edge.api.openapi_components import components, ref
from edge.api.pipeline import FAILOVER_HEADERS

JSON = "application/json"
KEYED: list[dict[str, list[str]]] = [{"bearer": []}, {"apiKey": []}]

# What each refusal means, for every endpoint that can give it.
STATUSES = {
    400: "The body isn't a JSON object (or nests too deep), a field is missing, of the wrong "
    "type, out of range or unknown (`field`, or `param` on /v1/, names it), the host isn't "
    "served here, or a provider refused the request itself.",
    401: "No client key, or one that is unknown, revoked or disabled.",
    403: "The key's app may not do this: call from this origin, ask for that provider by "
    'name, send priority "high", read the status; or plain HTTP where HTTPS is required.',
    404: "No such model here: use auto or a name GET /v1/models lists.",
    405: "Not the method this endpoint takes.",
    408: "The body didn't arrive within REQUEST_BODY_TIMEOUT_S.",
    413: "The body is over the endpoint's limit (each operation says which).",
    415: "The body isn't sent as application/json.",
    422: "A provider refused the request as invalid (its reason is in the call record).",
    429: "The app's (or, anonymous, the address's) requests or tokens per minute are used up.",
    503: "The gateway can't route requests now, or no provider could answer a request no "
    "prepared answer may stand in for: a no-fallback task, a tool call, JSON, an embedding, "
    "or a client app that takes no stand-in. Retry-After says when a retry may find one.",
}
REFUSAL_HEADERS = {
    401: {"WWW-Authenticate": ("Bearer, with the gateway's realm.", {"type": "string"})},
    405: {"Allow": ("The method to use.", {"type": "string"})},
    429: {"Retry-After": ("Seconds to wait.", {"type": "string", "pattern": "^[0-9]+$"})},
}
# Routed errors carry the X-Failover-* headers (refusals before routing don't).
ROUTED = (400, 422, 503)


def _failover_headers(required: frozenset[str]) -> dict[str, Any]:
    return {name: {**h, "required": name in required} for name, h in FAILOVER_HEADERS.items()}


def _refusal_headers(status: int) -> dict[str, Any]:
    return {
        name: {"description": description, "required": True, "schema": schema}
        for name, (description, schema) in REFUSAL_HEADERS.get(status, {}).items()
    }


def _errors(error: str, statuses: tuple[int, ...]) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "description": STATUSES[status],
            "content": {JSON: {"schema": ref(error)}},
        }
        headers = _failover_headers(frozenset()) if status in ROUTED else {}
        headers.update(_refusal_headers(status))
        if headers:
            response["headers"] = headers
        responses[str(status)] = response
    return responses


ANSWERED = frozenset({"X-Request-Id", "X-Failover-Tier", "X-Failover-Provider"})
ALWAYS = (400, 405, 408, 413)  # any request to the API handler: a bad host, method or body
ROUTING = (*ALWAYS, 401, 403, 415, 422, 429, 503)


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": ref(schema)}}}


def _operation(
    operation_id: str, summary: str, tag: str, responses: dict[str, Any], **more: Any
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "tags": [tag],
        **more,
        "responses": dict(sorted(responses.items())),
    }


def _ok(description: str, content: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"200": {"description": description, "content": content, **more}}


def _paths() -> dict[str, Any]:
    answered = {"headers": _failover_headers(ANSWERED)}
    return {
        "/api/v1/complete": {
            "post": _operation(
                "complete",
                "One prompt in, one answer out, from whichever tier can give it.",
                "gateway",
                {
                    **_ok("The answer.", {JSON: {"schema": ref("CompleteAnswer")}}, **answered),
                    **_errors("Error", ROUTING),
                },
                security=KEYED,
                requestBody=_body("CompleteRequest"),
            )
        },
        "/v1/chat/completions": {
            "post": _operation(
                "createChatCompletion",
                "OpenAI-compatible Chat Completions, whole or streamed, through the cascade.",
                "openai",
                {
                    **_ok(
                        "The completion; with stream: true, server-sent events (each "
                        "described here), ending with [DONE] or, broken, an error event.",
                        {
                            JSON: {"schema": ref("ChatCompletion")},
                            "text/event-stream": {"schema": ref("ChatStreamEvent")},
                        },
                        **answered,
                    ),
                    **_errors("OpenAIError", (*ROUTING, 404)),
                },
                security=KEYED,
                requestBody=_body("ChatCompletionRequest"),
            )
        },
        "/v1/responses": {
            "post": _operation(
                "createResponse",
                "OpenAI's Responses API, its text subset, whole or streamed, through the cascade.",
                "openai",
                {
                    **_ok(
                        "The Response object; with stream: true, typed server-sent events "
                        "(each described here), ending with response.completed or "
                        "response.incomplete or, broken, an error event.",
                        {
                            JSON: {"schema": ref("Response")},
                            "text/event-stream": {"schema": ref("ResponseStreamEvent")},
                        },
                        **answered,
                    ),
                    **_errors("OpenAIError", (*ROUTING, 404)),
                },
                security=KEYED,
                requestBody=_body("ResponseRequest"),
            )
        },
        "/v1/embeddings": {
            "post": _operation(
                "createEmbedding",
                "OpenAI's embeddings, through the providers that embed.",
                "openai",
                {
                    **_ok(
                        "The vectors, in the inputs' order.",
                        {JSON: {"schema": ref("Embeddings")}},
                        **answered,
                    ),
                    **_errors("OpenAIError", (*ROUTING, 404)),
                },
                security=KEYED,
                requestBody=_body("EmbeddingsRequest"),
            )
        },
        "/v1/messages": {
            "post": _operation(
                "createMessage",
                "Anthropic's Messages API, whole or streamed, through the cascade.",
                "anthropic",
                {
                    **_ok(
                        "The message; with stream: true, Anthropic's typed server-sent events "
                        "(each described here), ending with message_stop or, broken, an error "
                        "event.",
                        {
                            JSON: {"schema": ref("Message")},
                            "text/event-stream": {"schema": ref("MessageStreamEvent")},
                        },
                        **answered,
                    ),
                    **_errors("AnthropicError", (*ROUTING, 404)),
                },
                security=KEYED,
                requestBody=_body("MessageRequest"),
            )
        },
        "/v1/messages/count_tokens": {
            "post": _operation(
                "countMessageTokens",
                "A conversation's input tokens, by the gateway's estimate; no provider is asked.",
                "anthropic",
                {
                    **_ok("The count.", {JSON: {"schema": ref("TokenCount")}}),
                    **_errors("AnthropicError", (*ALWAYS, 401, 403, 404, 415, 503)),
                },
                security=KEYED,
                requestBody=_body("CountTokensRequest"),
            )
        },
        "/v1/models/{model}": {
            "get": _operation(
                "retrieveModel",
                "One name this key may give as model: auto, a provider, an alias, a served model.",
                "openai",
                {
                    **_ok("The model.", {JSON: {"schema": ref("Model")}}),
                    **_errors("OpenAIError", (*ALWAYS, 401, 403, 404, 503)),
                },
                security=KEYED,
                parameters=[
                    {
                        "name": "model",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1},
                    }
                ],
            )
        },
        "/v1/models": {
            "get": _operation(
                "listModels",
                "What model may be for this key: auto and each provider its app may name.",
                "openai",
                {
                    **_ok("The models.", {JSON: {"schema": ref("ModelList")}}),
                    **_errors("OpenAIError", (*ALWAYS, 401, 403, 503)),
                },
                security=KEYED,
            )
        },
        "/api/v1/status": {
            "get": _operation(
                "status",
                "Live state per provider: breaker, failures, p95, budgets; the kill switch.",
                "gateway",
                {
                    **_ok("The status.", {JSON: {"schema": ref("Status")}}),
                    **_errors("Error", (*ALWAYS, 401, 403)),
                },
                security=[*KEYED, {"adminSession": []}],
            )
        },
        "/api/openapi.json": {
            "get": _operation(
                "openapi",
                "This document.",
                "gateway",
                {**_ok("The OpenAPI document.", {JSON: {}}), **_errors("Error", ALWAYS)},
                security=[],
            )
        },
        "/healthz": {
            "get": _operation(
                "healthz",
                "The process is up.",
                "probes",
                {**_ok("Up.", {JSON: {"schema": ref("Healthz")}}), **_probe_refusals()},
                security=[],
            )
        },
        "/readyz": {
            "get": _operation(
                "readyz",
                "The database and (when configured) Redis answer.",
                "probes",
                {
                    **_ok("Ready.", {JSON: {"schema": ref("Readyz")}}),
                    "503": {
                        "description": "Not ready: a check failed (named only to "
                        "PROBE_DETAIL_ALLOWED_IPS).",
                        "content": {JSON: {"schema": ref("Readyz")}},
                    },
                    **_probe_refusals(),
                },
                security=[],
            )
        },
    }


def _with_body_limits(paths: dict[str, Any]) -> dict[str, Any]:
    """Each operation's 413 names its own limit (`body_limit_for`, from BODY_LIMIT_*_BYTES)."""
    for path, operations in paths.items():
        limit = body_limit_for(path)
        for operation in operations.values():
            if "413" in operation["responses"]:
                operation["responses"]["413"]["description"] = (
                    f"The body is over {limit} bytes ({byte_size(limit)}), this endpoint's "
                    "limit; a declared Content-Length over it is refused before the body is read."
                )
    return paths


def _probe_refusals() -> dict[str, Any]:
    # Django's own answer (the probes are served by the full stack): no JSON body.
    return {"405": {"description": STATUSES[405], "headers": _refusal_headers(405)}}


@functools.cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "AI failover gateway",
            "version": "1",
            "description": "One prompt (or an OpenAI Chat Completions request) in, one answer "
            "out, from whichever provider, cache or static tier can give it. The API needs a "
            "client key (Authorization: Bearer, as OpenAI's SDKs send it, or X-Api-Key) "
            "unless the policy allows anonymous calls.",
        },
        "tags": [
            {"name": "gateway", "description": "The gateway's own endpoints."},
            {"name": "openai", "description": "OpenAI-compatible; errors in OpenAI's shape."},
            {
                "name": "anthropic",
                "description": "Anthropic's Messages API; errors in Anthropic's shape.",
            },
            {"name": "probes", "description": "For load balancers and orchestrators."},
        ],
        "paths": _with_body_limits(_paths()),
        "components": {
            "schemas": components(),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The client key, as OpenAI's SDKs send theirs.",
                },
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
                "adminSession": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": settings.SESSION_COOKIE_NAME,
                    "description": "A staff user's admin session (the status only).",
                },
            },
        },
    }


@functools.cache
def _document_bytes() -> bytes:
    return json.dumps(openapi_document(), ensure_ascii=False).encode()


@json_errors
async def openapi_json(request: HttpRequest) -> HttpResponseBase:
    wrong = wrong_method(request, "GET")
    if wrong is not None:
        return wrong
    problem = checked_host(request)
    if problem is not None:
        return error_response(problem)
    return HttpResponse(_document_bytes(), content_type=JSON)
