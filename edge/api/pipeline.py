"""The one pipeline every chat-like door runs (`served`): arrive (`edge/api/arrival.py`) → route
(the body's `model` read by `resolve_model`, the caller admitted, the cascade asked) → answer
in the door's shape, whole or as a relayed stream, or the routed error in the door's words; the
ledger's record of it either way. A door (`Door`) is its words only: how it reads its body, what
it asks, how it answers and refuses. Here too: the routed request built from a parsed body, the
`X-Failover-*` headers, and the relay of a stream whatever its framing."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol, cast

from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from edge.api.access import Caller
from edge.api.arrival import Arrival, arrived, new_request_id, unroutable
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.models import resolve_model
from edge.api.turned_away import refused
from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import CompletionRequest, Piece, ToolCallDelta
from gateway.engine.clients import ALL_STAND_INS, ANONYMOUS_CACHE, StandIn
from gateway.engine.tracing import REQUEST
from gateway.routing.cascade import RouteRequest, RouteResult, finish_stream, route
from gateway.routing.ports import Runtime
from gateway.routing.rate_limits import RateTicket
from gateway.routing.walk import Tier
from runtime.gateway import Gateway
from runtime.outcomes import record_call
from runtime.tracing import RequestSpan

logger = logging.getLogger(__name__)


def _as_it_is(result: RouteResult) -> RouteResult:
    return result


@dataclass(frozen=True, slots=True)
class Door:
    """One front door's words: how it reads a body (`parse`: the door's request, or the
    ApiError that refuses it), what it asks the cascade (`ask`), how it answers, whole (`whole`,
    the JSON body) or streamed (`frames`), how it refuses (`render`, its error shape), and a
    routed error in its own words (`worded`). The request `parse` makes has the fields every
    chat-like body has: model, stream, and the gateway's own priority, task, allow_cloud, cache
    and user."""

    parse: Callable[[bytes], Any]
    ask: Callable[[Any, HttpRequest], CompletionRequest]
    whole: Callable[[Any, RouteResult, str], dict[str, Any]]
    frames: Callable[[Any, RouteResult, str], Frames]
    render: Callable[[ApiError], JsonAnswer]
    worded: Callable[[RouteResult], RouteResult] = _as_it_is


async def served(door: Door, request: HttpRequest) -> HttpResponseBase:
    """A request at `door`, through the pipeline: its answer, or its refusal, in the door's
    shape."""
    started = time.perf_counter()
    arrival = await arrived(request, door.parse, door.render)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, parsed = arrival.gateway, arrival.parsed
    found = await routed_by_model(arrival, door.ask(parsed, request), door.render)
    if isinstance(found, HttpResponseBase):
        return found
    routed, result = found
    request_id = routed.request_id
    headers = failover_headers(result, request_id)
    if result.error is not None:
        record_call(gateway, routed, result, ms_since(started))
        return routed_error(door.worded(result), headers, door.render)
    if parsed.stream:
        frames = door.frames(parsed, result, request_id)
        return EventStreamResponse(relay(frames, gateway, routed, result, started), headers=headers)
    record_call(gateway, routed, result, ms_since(started))
    return JsonAnswer(door.whole(parsed, result, request_id), headers=headers)


async def routed_by_model(
    arrival: Arrival,
    completion: CompletionRequest,
    render: Callable[[ApiError], JsonAnswer],
) -> tuple[RouteRequest, RouteResult] | HttpResponseBase:
    """A chat-like request routed as its `model` reads (`resolve_model`), once the caller is
    admitted: the request and its result, or the refusal in the door's error shape (`render`).
    What the app may not ask for is refused before anything says whether it exists."""
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    choice = resolve_model(caller, await gateway.snapshots.current(), parsed.model)
    if isinstance(choice, ApiError):
        return refused(choice, render, arrival.request, caller, arrival.body)
    refusal = arrival.forbidden(priority=parsed.priority, prefer=choice.prefer)
    if refusal is not None:
        return refused(refusal, render, arrival.request, caller, arrival.body)
    routed = route_request(
        parsed,
        completion,
        caller,
        arrival.rate,
        stream=parsed.stream,
        prefer=choice.prefer,
        group=choice.group,
        then_cascade=choice.then_cascade,
    )
    return routed, await route_safely(routed, gateway)


def ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def routed_error(
    result: RouteResult,
    headers: dict[str, str],
    render: Callable[[ApiError], JsonAnswer],
) -> JsonAnswer:
    """A routed request's error (`result.error`) in the door's shape, with its headers."""
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


def route_request(
    parsed: Any,
    completion: CompletionRequest,
    caller: Caller,
    rate: RateTicket | None,
    **extra: Any,
) -> RouteRequest:
    """The request to route, with the gateway's own fields both endpoints take (priority,
    task, allow_cloud, cache, user), as far as the caller may use them."""
    trace = REQUEST.get()
    if trace is not None:  # the process exports traces: what the request asks for
        cast(RequestSpan, trace).asked(
            operation="embeddings" if completion.embed else "chat",
            model=getattr(parsed, "model", "") or "auto",
            max_tokens=completion.max_tokens,
            temperature=completion.temperature,
            top_p=completion.top_p,
            stream=bool(extra.get("stream", False)),
        )
    return RouteRequest(
        completion=completion,
        request_id=new_request_id(),
        priority=parsed.priority,
        task=parsed.task,
        allow_cloud=parsed.allow_cloud and caller.allow_cloud,
        client=caller.name,
        use_cache=parsed.cache,
        sticky_key=parsed.user,
        rate=rate,
        stand_ins=caller.app.stand_ins if caller.app is not None else ALL_STAND_INS,
        cache_scope=caller.app.cache_scope if caller.app is not None else ANONYMOUS_CACHE,
        **extra,
    )


async def route_safely(routed: RouteRequest, runtime: Runtime) -> RouteResult:
    try:
        return await route(routed, runtime)
    except Exception:
        # Providers' failures are classified inside the router; reaching this means the
        # platform itself failed (its configuration couldn't be read, say). The request is
        # still answered in JSON and still recorded.
        logger.exception("routing failed for request %s", routed.request_id)
        return unroutable()


# The tiers an answer comes from (`RouteResult.tier`; "none" on an error that was routed).
TIERS = tuple(tier.value for tier in Tier if tier != Tier.NONE)
# `failover_headers` as the OpenAPI document describes them: on every routed answer.
FAILOVER_HEADERS: dict[str, dict[str, Any]] = {
    "X-Request-Id": {
        "description": "The request's id in the call ledger.",
        "schema": {"type": "string"},
    },
    "X-Failover-Tier": {
        "description": "Which tier answered (none: an error after routing).",
        "schema": {"enum": [*TIERS, "none"]},
    },
    "X-Failover-Provider": {
        "description": "The provider that answered, or the tier that stood in.",
        "schema": {"type": "string"},
    },
    "X-Failover-Cache-Age": {
        "description": "A cached answer's age, in seconds.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "X-Failover-Stand-In": {
        "description": "On an answer no provider gave: what stood in for it (cached, static or "
        "degraded, as the client app's stand-ins allow).",
        "schema": {"enum": [stand_in.value for stand_in in StandIn]},
    },
    "X-Failover-Dropped": {
        "description": "The request's fields the answering provider's call left out, comma "
        "separated: it has no place for them (thinking for a model that doesn't think, an "
        "Anthropic setting on another kind of provider); the ledger's attempt names them too.",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "On a 503 no provider answered: seconds until a retry may find one (the "
        "earliest probe of the breakers that turned the request away).",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
}
# What stood in for a provider's answer, by the tier that gave it.
_STAND_INS = {
    Tier.CACHE: StandIn.CACHED,
    Tier.STATIC: StandIn.STATIC,
    Tier.DEGRADED: StandIn.DEGRADED,
}


def failover_headers(result: RouteResult, request_id: str) -> dict[str, str]:
    headers = {
        "X-Request-Id": request_id,
        "X-Failover-Tier": result.tier,
        "X-Failover-Provider": result.provider or result.tier,
    }
    if result.cached_age_s is not None:
        headers["X-Failover-Cache-Age"] = str(result.cached_age_s)
    if result.is_fallback and result.tier in _STAND_INS:
        headers["X-Failover-Stand-In"] = _STAND_INS[result.tier].value
    if result.retry_after_s is not None:
        headers["Retry-After"] = str(result.retry_after_s)
    if dropped := result.dropped:
        headers["X-Failover-Dropped"] = ",".join(dropped)
    return headers
