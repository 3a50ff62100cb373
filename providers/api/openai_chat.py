"""The OpenAI-compatible endpoint `POST /v1/chat/completions` (the model list is in
`providers/api/models.py`).

Existing OpenAI SDKs and tools point their base URL here and gain the cascade unchanged. The
request is a Chat Completions request; `model` is `auto` (the cascade), a model alias's name
(its providers and models in turn) or a provider's name (that provider first, then the
cascade), as `providers.api.models.resolve_model` reads it. Answers come in OpenAI's shapes,
whole or streamed as server-sent events ending with `data: [DONE]`, and errors in OpenAI's
error shape. The gateway's own fields (`priority`, `task`, `allow_cloud`, `cache`) may ride
along as extra body fields, and every answer carries the `X-Failover-*` headers.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import aclosing

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from failover_site.runtime.gateway import Gateway, get_gateway
from failover_site.runtime.outcomes import record_call
from providers.adapters.errors import ProviderError
from providers.adapters.messages import CompletionRequest
from providers.api.chat_request import parse_chat
from providers.api.common import (
    Refusal,
    caller_admitted,
    caller_of,
    checked_envelope,
    checked_host,
    failover_headers,
    json_errors,
    refused,
    route_request,
    route_safely,
    wrong_method,
)
from providers.api.json_body import ApiError
from providers.api.models import resolve_model
from providers.api.openai_shapes import BROKEN, DONE, Shape, delta, error_body
from providers.routing.cascade import RouteRequest, RouteResult, finish_stream


def openai_error(error: ApiError) -> JsonResponse:
    return JsonResponse(error_body(error), status=error.status)


openai_json_errors = functools.partial(json_errors, render=openai_error)


@openai_json_errors
async def not_found(request: HttpRequest) -> JsonResponse:
    return openai_error(ApiError(404, "not_found", f"No endpoint at {request.path}."))


@openai_json_errors
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    wrong = wrong_method(request, "POST", openai_error)
    if wrong is not None:
        return wrong
    problem = checked_host(request) or checked_envelope(request)
    if problem is not None:
        return openai_error(problem)
    gateway = get_gateway()
    caller = await caller_of(request, gateway)
    if isinstance(caller, Refusal):
        return refused(caller, openai_error)
    parsed = parse_chat(request.body)
    if isinstance(parsed, ApiError):
        return openai_error(parsed)
    # What the app may not ask for is refused before anything says whether it exists.
    choice = resolve_model(caller, await gateway.snapshots.current(), parsed.model)
    if isinstance(choice, ApiError):
        return openai_error(choice)
    prefer = choice.prefer
    ticket = await caller_admitted(caller, gateway, priority=parsed.priority, prefer=prefer)
    if isinstance(ticket, Refusal):
        return refused(ticket, openai_error)

    routed = route_request(
        parsed,
        CompletionRequest(
            prompt=parsed.prompt,
            system_prompt=parsed.system_prompt,
            history=parsed.history,
            max_tokens=parsed.max_tokens,
            temperature=parsed.temperature,
            top_p=parsed.top_p,
            stop=parsed.stop,
            turns=parsed.turns,
            tools=parsed.tools,
            tool_choice=parsed.tool_choice,
            output=parsed.output,
            options=parsed.options,
        ),
        caller,
        ticket,
        stream=parsed.stream,
        prefer=prefer,
        group=choice.group,
        then_cascade=choice.then_cascade,
    )
    request_id = routed.request_id
    result = await route_safely(routed, gateway)
    headers = failover_headers(result, request_id)
    if result.error is not None:
        record_call(gateway, routed, result, _ms_since(started))
        error = ApiError(
            result.status,
            result.error["code"],
            result.error["message"],
            result.error.get("param"),
        )
        response = openai_error(error)
        for name, value in headers.items():
            response[name] = value
        return response
    shape = Shape(parsed, result, request_id)
    if parsed.stream:
        events = _events(shape, gateway, routed, result, started)
        return EventStreamResponse(events, headers=headers)
    record_call(gateway, routed, result, _ms_since(started))
    return JsonResponse(shape.completion(), headers=headers)


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


async def _events(
    shape: Shape, gateway: Gateway, routed: RouteRequest, result: RouteResult, started: float
) -> AsyncIterator[bytes]:
    """The stream: the role and the first text (already here: the router waited for it),
    the rest as it arrives, the finish, the usage if asked, `[DONE]`. A provider that breaks
    after the first token ends the stream with an error event: nothing from another provider
    is ever spliced into the answer. The ledger line is written when the stream ends."""
    error: ProviderError | None = None
    client_gone = True  # until the stream gets to its end
    try:
        yield shape.chunk({"role": "assistant", "content": ""}, failover=True)
        if result.stream is not None:
            for thought in result.stream.before:
                yield shape.chunk(delta(thought))
        first = result.stream.first if result.stream is not None else result.text
        yield shape.chunk(delta(first))
        if result.stream is not None:
            try:
                async with aclosing(result.stream.rest()) as pieces:
                    async for piece in pieces:
                        yield shape.chunk(delta(piece))
            except ProviderError as exc:
                error = exc
            await finish_stream(result, error)
        client_gone = False
        if error is not None:
            yield BROKEN
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
