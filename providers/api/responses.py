"""`POST /v1/responses`: the text subset of OpenAI's Responses API, through the same cascade as
`/v1/chat/completions`.

The body (`providers/api/responses_request.py`) becomes the same `CompletionRequest` a Chat
Completions request does; `model` is read by `providers.api.models.resolve_model`, as there
(`auto`, a model alias or a provider's name). The answer is a Response object
(`providers/api/responses_shapes.py`), whole or streamed as typed server-sent events
(`event: <type>` beside its JSON), errors in OpenAI's error shape, every answer with the
`X-Failover-*` headers. Nothing is stored: a response can't be fetched or continued later.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from failover_site.runtime.gateway import Gateway, get_gateway
from failover_site.runtime.outcomes import record_call
from providers.adapters.errors import ProviderError
from providers.adapters.messages import ToolCallDelta
from providers.api.common import (
    Refusal,
    caller_admitted,
    caller_of,
    checked_envelope,
    checked_host,
    failover_headers,
    refused,
    route_request,
    route_safely,
    wrong_method,
)
from providers.api.json_body import ApiError
from providers.api.models import resolve_model
from providers.api.openai_chat import (
    EventStreamResponse,
    _ms_since,
    openai_error,
    openai_json_errors,
)
from providers.api.responses_request import parse_responses
from providers.api.responses_shapes import ResponseEvents, ResponseShape
from providers.routing.cascade import RouteRequest, RouteResult, finish_stream


@openai_json_errors
async def responses(request: HttpRequest) -> HttpResponseBase:
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
    parsed = parse_responses(request.body)
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
        parsed.completion,
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
    shape = ResponseShape(parsed, result, request_id)
    if parsed.stream:
        events = _events(ResponseEvents(shape), gateway, routed, result, started)
        return EventStreamResponse(events, headers=headers)
    record_call(gateway, routed, result, _ms_since(started))
    return JsonResponse(shape.response(), headers=headers)


async def _events(
    events: ResponseEvents,
    gateway: Gateway,
    routed: RouteRequest,
    result: RouteResult,
    started: float,
) -> AsyncIterator[bytes]:
    """The stream: the response created and in progress, the first piece (already here: the
    router waited for it), the rest as it arrives, each item done, the whole response. A
    provider that breaks after the first token ends the stream with an error event: nothing
    from another provider is ever spliced into the answer. The ledger line is written when the
    stream ends."""
    error: ProviderError | None = None
    client_gone = True  # until the stream gets to its end
    try:
        for event in events.opening():
            yield event
        if result.stream is None:  # a whole answer (cached, static): its text, then its calls
            for event in events.piece(result.text):
                yield event
            for index, call in enumerate(result.tool_calls):
                for event in events.piece(ToolCallDelta(index, call.id, call.name, call.arguments)):
                    yield event
        else:
            for event in events.piece(result.stream.first):
                yield event
            try:
                async with aclosing(result.stream.rest()) as pieces:
                    async for piece in pieces:
                        for event in events.piece(piece):
                            yield event
            except ProviderError as exc:
                error = exc
            await finish_stream(result, error)
        client_gone = False
        if error is not None:
            yield events.broken()
            return
        for event in events.closing():
            yield event
    finally:
        if client_gone and result.stream is not None:
            await finish_stream(result, None, client_gone=True)
        record_call(gateway, routed, result, _ms_since(started))
