"""What the OpenAI-compatible endpoints share: OpenAI's error shape, a request's arrival (method,
host, envelope, caller, body), a routed error's answer, and the relay of a streamed answer
whatever its framing (chat chunks or the Responses API's typed events)."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing
from typing import Any, Protocol

from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from edge.api.common import Arrival, json_errors
from edge.api.common import arrived as arrive
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.openai_shapes import error_body
from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import Piece, ToolCallDelta
from gateway.routing.cascade import RouteRequest, RouteResult, finish_stream
from runtime.gateway import Gateway
from runtime.outcomes import record_call


def openai_error(error: ApiError) -> JsonAnswer:
    return JsonAnswer(error_body(error), status=error.status)


openai_json_errors = functools.partial(json_errors, render=openai_error)


def ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


async def arrived(
    request: HttpRequest, parse: Callable[[bytes], Any]
) -> Arrival | HttpResponseBase:
    """A POST's checks in their order (`edge.api.common.arrived`), refused in OpenAI's
    error shape."""
    return await arrive(request, parse, openai_error)


def routed_error(
    result: RouteResult,
    headers: dict[str, str],
    render: Callable[[ApiError], JsonAnswer] = openai_error,
) -> JsonAnswer:
    """A routed request's error (`result.error`) in the endpoint's shape (OpenAI's unless
    `render` says another), with its headers."""
    assert result.error is not None
    error = result.error
    response = render(ApiError(result.status, error.code, error.message, error.param or None))
    for name, value in headers.items():
        response[name] = value
    return response


class Frames(Protocol):
    """How an endpoint frames a streamed answer's events."""

    def opening(self) -> Iterable[bytes]: ...
    def piece(self, piece: Piece) -> Iterable[bytes]: ...
    def broken(self) -> bytes: ...
    def closing(self, result: RouteResult) -> Iterable[bytes]: ...


def first_pieces(result: RouteResult) -> list[Piece]:
    """What is already here when the stream starts: a provider's thinking and first piece (the
    router waited for it), or a whole answer (cached, static): its text, then its calls."""
    if result.stream is not None:
        return [*result.stream.before, result.stream.first]
    calls = [
        ToolCallDelta(index, call.id, call.name, call.arguments)
        for index, call in enumerate(result.tool_calls)
    ]
    return [result.text, *calls]


async def relay(
    frames: Frames, gateway: Gateway, routed: RouteRequest, result: RouteResult, started: float
) -> AsyncIterator[bytes]:
    """The stream: its opening, the first pieces, the rest as they arrive, its closing. A
    provider that breaks after the first token ends the stream with the broken event: nothing
    from another provider is ever spliced into the answer. The stream's bookkeeping is settled
    when it ends (the client gone included), and its ledger line written then."""
    error: ProviderError | None = None
    client_gone = True  # until the stream gets to its end
    try:
        for event in frames.opening():
            yield event
        for piece in first_pieces(result):
            for event in frames.piece(piece):
                yield event
        if result.stream is not None:
            try:
                async with aclosing(result.stream.rest()) as pieces:
                    async for piece in pieces:
                        for event in frames.piece(piece):
                            yield event
            except ProviderError as exc:
                error = exc
            result = await finish_stream(result, error)
        client_gone = False
        if error is not None:
            yield frames.broken()
            return
        for event in frames.closing(result):
            yield event
    finally:
        if client_gone and result.stream is not None:
            result = await finish_stream(result, None, client_gone=True)
        record_call(gateway, routed, result, ms_since(started))


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
