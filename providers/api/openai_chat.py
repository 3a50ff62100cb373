"""The OpenAI-compatible endpoints: `POST /v1/chat/completions` and `GET /v1/models`.

Existing OpenAI SDKs and tools point their base URL here and gain the cascade unchanged. The
request is a Chat Completions request; `model` is `auto` (the cascade) or a provider's name
(that provider first, then the cascade). Answers come in OpenAI's shapes, whole or streamed as
server-sent events ending with `data: [DONE]`, and errors in OpenAI's error shape. The gateway's
own fields (`priority`, `task`, `allow_cloud`, `cache`) may ride along as extra body fields, and
every answer carries the `X-Failover-*` headers.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from failover_site.runtime.gateway import Gateway, get_gateway
from failover_site.runtime.outcomes import record_call
from providers.adapters.errors import ProviderError
from providers.adapters.messages import CompletionRequest
from providers.api.common import (
    checked_envelope,
    checked_host,
    failover_headers,
    json_errors,
    route_request,
    route_safely,
)
from providers.api.validation import ApiError, ChatBody, parse_chat
from providers.routing.cascade import RouteRequest, RouteResult, finish_stream

AUTO_MODEL = "auto"
# OpenAI's error types, by status.
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(error: ApiError) -> JsonResponse:
    kind = ERROR_TYPES.get(error.status) or (
        "invalid_request_error" if error.status < 500 else "server_error"
    )
    body = {"message": error.message, "type": kind, "param": error.field, "code": error.code}
    return JsonResponse({"error": body}, status=error.status)


openai_json_errors = functools.partial(json_errors, render=openai_error)


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = openai_error(ApiError(405, "method_not_allowed", f"Use {allowed}."))
    response["Allow"] = allowed
    return response


@openai_json_errors
async def not_found(request: HttpRequest) -> JsonResponse:
    return openai_error(ApiError(404, "not_found", f"No endpoint at {request.path}."))


@openai_json_errors
async def models(request: HttpRequest) -> JsonResponse:
    if request.method != "GET":
        return _method_not_allowed("GET")
    problem = checked_host(request)
    if problem is not None:
        return openai_error(problem)
    snapshot = await get_gateway().snapshots.current()
    created = int(time.time())
    data = [
        {"id": AUTO_MODEL, "object": "model", "created": created, "owned_by": "failover"},
        *(
            {
                "id": provider.name,
                "object": "model",
                "created": created,
                "owned_by": provider.kind,
                "upstream_model": provider.model,
            }
            for provider in snapshot.providers
        ),
    ]
    return JsonResponse({"object": "list", "data": data})


@openai_json_errors
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    if request.method != "POST":
        return _method_not_allowed("POST")
    problem = checked_host(request) or checked_envelope(request)
    if problem is not None:
        return openai_error(problem)
    parsed = parse_chat(request.body)
    if isinstance(parsed, ApiError):
        return openai_error(parsed)
    gateway = get_gateway()
    prefer = ""
    if parsed.model != AUTO_MODEL:
        snapshot = await gateway.snapshots.current()
        if snapshot.provider(parsed.model) is None:
            return openai_error(
                ApiError(
                    404,
                    "model_not_found",
                    f"The model '{parsed.model}' does not exist here: use \"auto\" or the name "
                    "of an enabled provider (GET /v1/models lists them).",
                    "model",
                )
            )
        prefer = parsed.model

    routed = route_request(
        request,
        parsed,
        CompletionRequest(
            prompt=parsed.prompt,
            system_prompt=parsed.system_prompt,
            history=parsed.history,
            max_tokens=parsed.max_tokens,
            temperature=parsed.temperature,
            top_p=parsed.top_p,
            stop=parsed.stop,
        ),
        stream=parsed.stream,
        prefer=prefer,
    )
    request_id = routed.request_id
    result = await route_safely(routed, gateway)
    headers = failover_headers(result, request_id)
    if result.error is not None:
        record_call(gateway, routed, result, _ms_since(started))
        error = ApiError(result.status, result.error["code"], result.error["message"])
        response = openai_error(error)
        for name, value in headers.items():
            response[name] = value
        return response
    shape = _Shape(parsed, result, request_id)
    if parsed.stream:
        events = _events(shape, gateway, routed, result, started)
        return EventStreamResponse(events, headers=headers)
    record_call(gateway, routed, result, _ms_since(started))
    return JsonResponse(shape.completion(), headers=headers)


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


class _Shape:
    """The answer in OpenAI's words, whole or as stream chunks."""

    def __init__(self, parsed: ChatBody, result: RouteResult, request_id: str) -> None:
        self.parsed = parsed
        self.result = result
        self.id = f"chatcmpl-{request_id.replace('-', '')}"
        self.created = int(time.time())
        self.request_id = request_id
        # Who answered: the provider's name, or the tier that stood in for one.
        self.model = result.provider or result.tier

    def failover(self) -> dict[str, Any]:
        result = self.result
        return {
            "tier": result.tier,
            "provider": result.provider or None,
            "is_fallback": result.is_fallback,
            "degradation_notice": result.degradation_notice,
            "request_id": self.request_id,
            "cached_age_s": result.cached_age_s,
        }

    def usage(self) -> dict[str, int]:
        result = self.result
        return {
            "prompt_tokens": result.tokens_in,
            "completion_tokens": result.tokens_out,
            "total_tokens": result.tokens_in + result.tokens_out,
        }

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.result.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": self.result.finish_reason,
                }
            ],
            "usage": self.usage(),
            "failover": self.failover(),
        }

    def chunk(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        *,
        failover: bool = False,
    ) -> bytes:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.parsed.include_usage:
            body["usage"] = None
        if failover:
            body["failover"] = self.failover()
        return _event(body)

    def usage_chunk(self) -> bytes:
        return _event(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": None,
                "choices": [],
                "usage": self.usage(),
            }
        )


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


async def _events(
    shape: _Shape, gateway: Gateway, routed: RouteRequest, result: RouteResult, started: float
) -> AsyncIterator[bytes]:
    """The stream: the role and the first text (already here: the router waited for it),
    the rest as it arrives, the finish, the usage if asked, `[DONE]`. A provider that breaks
    after the first token ends the stream with an error event: nothing from another provider
    is ever spliced into the answer. The ledger line is written when the stream ends."""
    error: ProviderError | None = None
    client_gone = True  # until the stream gets to its end
    try:
        yield shape.chunk({"role": "assistant", "content": ""}, failover=True)
        yield shape.chunk({"content": result.text})
        if result.stream is not None:
            try:
                async with aclosing(result.stream.rest()) as pieces:
                    async for piece in pieces:
                        yield shape.chunk({"content": piece})
            except ProviderError as exc:
                error = exc
            await finish_stream(result, error)
        client_gone = False
        if error is not None:
            yield _event(
                {
                    "error": {
                        "message": "The provider's answer broke off; it is incomplete.",
                        "type": "server_error",
                        "param": None,
                        "code": "stream_interrupted",
                    }
                }
            )
            return
        yield shape.chunk({}, result.finish_reason)
        if shape.parsed.include_usage:
            yield shape.usage_chunk()
        yield DONE
    finally:
        if client_gone and result.stream is not None:
            await finish_stream(result, None, client_gone=True)
        record_call(gateway, routed, result, _ms_since(started))


class EventStreamResponse(StreamingHttpResponse):
    """Server-sent events from an async generator that is closed (and so settles the stream's
    bookkeeping) as soon as the response ends, even when the client goes away mid-stream:
    Django's own wrapper would leave the generator for the garbage collector."""

    def __init__(self, events: AsyncIterator[bytes], *, headers: dict[str, str]) -> None:
        super().__init__(events, content_type="text/event-stream; charset=utf-8", headers=headers)
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"  # nginx: pass each event through at once
        self._events = events

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._events
