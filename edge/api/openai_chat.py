"""The OpenAI-compatible endpoint `POST /v1/chat/completions` (the model list is in
`edge/api/models.py`).

Existing OpenAI SDKs and tools point their base URL here and gain the cascade unchanged. The
request is a Chat Completions request; `model` is `auto` (the cascade), a provider's name
(that provider first, then the cascade), a model alias's name (its providers and models in
turn) or a model a provider serves (every provider serving it, then the cascade), as
`edge.api.models.resolve_model` reads it. Answers come in OpenAI's shapes,
whole or streamed as server-sent events ending with `data: [DONE]`, and errors in OpenAI's
error shape. The gateway's own fields (`priority`, `task`, `allow_cloud`, `cache`) may ride
along as extra body fields, and every answer carries the `X-Failover-*` headers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponseBase

from edge.api.chat_request import parse_chat
from edge.api.common import (
    Refusal,
    caller_admitted,
    failover_headers,
    refused,
    route_request,
    route_safely,
)
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.models import resolve_model
from edge.api.openai_common import (
    Arrival,
    EventStreamResponse,
    arrived,
    ms_since,
    openai_error,
    openai_json_errors,
    relay,
    routed_error,
)
from edge.api.openai_shapes import BROKEN, DONE, Shape, delta
from gateway.adapters.messages import CompletionRequest, Piece
from gateway.routing.cascade import RouteRequest, RouteResult
from runtime.outcomes import record_call


@openai_json_errors
async def not_found(request: HttpRequest) -> JsonAnswer:
    return openai_error(ApiError(404, "not_found", f"No endpoint at {request.path}."))


@openai_json_errors
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    arrival = await arrived(request, parse_chat)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, parsed = arrival.gateway, arrival.parsed
    found = await routed_by_model(
        arrival,
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
            thinking=parsed.thinking,
        ),
    )
    if isinstance(found, HttpResponseBase):
        return found
    routed, result = found
    request_id = routed.request_id
    headers = failover_headers(result, request_id)
    if result.error is not None:
        record_call(gateway, routed, result, ms_since(started))
        return routed_error(result, headers)
    shape = Shape(parsed, result, request_id)
    if parsed.stream:
        events = relay(ChatFrames(shape), gateway, routed, result, started)
        return EventStreamResponse(events, headers=headers)
    record_call(gateway, routed, result, ms_since(started))
    return JsonAnswer(shape.completion(), headers=headers)


async def routed_by_model(
    arrival: Arrival,
    completion: CompletionRequest,
    render: Callable[[ApiError], JsonAnswer] = openai_error,
) -> tuple[RouteRequest, RouteResult] | HttpResponseBase:
    """A chat-like request routed as its `model` reads (`resolve_model`), once the caller is
    admitted: the request and its result, or the refusal in the endpoint's error shape
    (OpenAI's unless `render` says another). What the app may not ask for is refused before
    anything says whether it exists."""
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    choice = resolve_model(caller, await gateway.snapshots.current(), parsed.model)
    if isinstance(choice, ApiError):
        return refused(choice, render, arrival.request, caller, arrival.body)
    ticket = await caller_admitted(caller, gateway, priority=parsed.priority, prefer=choice.prefer)
    if isinstance(ticket, Refusal):
        return refused(ticket, render, arrival.request, caller, arrival.body)
    routed = route_request(
        parsed,
        completion,
        caller,
        ticket,
        stream=parsed.stream,
        prefer=choice.prefer,
        group=choice.group,
        then_cascade=choice.then_cascade,
    )
    return routed, await route_safely(routed, gateway)


class ChatFrames:
    """A chat stream's chunks: the role (with the failover object), a chunk a piece, then the
    finish, the usage if asked, `[DONE]`; a broken one ends with an error event instead."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    def opening(self) -> Iterable[bytes]:
        return [self.shape.chunk({"role": "assistant", "content": ""}, failover=True)]

    def piece(self, piece: Piece) -> Iterable[bytes]:
        return [self.shape.chunk(delta(piece))]

    def broken(self) -> bytes:
        return BROKEN

    def closing(self, result: RouteResult) -> Iterable[bytes]:
        shape = self.shape
        shape.result = result  # the stream's result as it ended: its finish and usage
        yield shape.chunk({}, result.finish_reason)
        if shape.parsed.include_usage:
            yield shape.usage_chunk()
        yield DONE
