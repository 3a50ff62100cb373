"""A request's arrival at any door, before anything is routed: its checks in their order
(method, host, envelope, the caller's key and rate limit, the body, what it asks: `access`), each
refusal in the door's error shape through the one hook that counts and keeps it
(`turned_away`), JSON errors, and the request's id. What happens next is the pipeline's
(`edge/api/pipeline.py`).

Served by the lean API handler (`failover_site.asgi`): no session, auth or CSRF middleware, so a
request never leaves the event loop. Every failure answers JSON, with a 4xx for the client's
mistakes; a provider's failure is never the client's 5xx.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase

from edge.api.access import Caller, Refusal, identify_or_find, permitted, rate_checked
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.turned_away import refused
from gateway.adapters.messages import CompletionRequest
from gateway.routing.cascade import RouteError, RouteRequest, RouteResult
from gateway.routing.rate_limits import RateTicket
from gateway.routing.walk import Tier
from runtime.gateway import Gateway, NotServing, gateway_of
from runtime.outcomes import record_call

logger = logging.getLogger(__name__)

# The request body limits, by endpoint: a long-context conversation or a full embeddings batch
# runs to megabytes, anything else the API takes (the frontends' own JSON) is small. Paths not
# named here (every other /api/ and /v1/ path, a bodiless GET included) get the small one.
CHAT_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"}
)
EMBEDDINGS_PATHS = frozenset({"/v1/embeddings"})


def body_limit_for(path: str) -> int:
    """The most bytes a request body may hold on `path` (BODY_LIMIT_*_BYTES): what the API
    handler holds a body to as it arrives, and `checked_envelope` and `body_of` after it."""
    if path in CHAT_PATHS:
        return int(settings.BODY_LIMIT_CHAT_BYTES)
    if path in EMBEDDINGS_PATHS:
        return int(settings.BODY_LIMIT_EMBEDDINGS_BYTES)
    return int(settings.BODY_LIMIT_API_BYTES)


def byte_size(count: int) -> str:
    """A byte count as people write it: 4 MiB, 64 KiB, 1.5 MiB, 1000 bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{round(count / size, 1):g} {unit}"
    return f"{count} bytes"


def body_too_large(path: str) -> ApiError:
    limit = body_limit_for(path)
    return ApiError(
        413,
        "body_too_large",
        f"The body may be at most {limit} bytes ({byte_size(limit)}) on {path}.",
    )


def error_response(error: ApiError) -> JsonAnswer:
    return JsonAnswer({"error": error.as_dict()}, status=error.status)


# The answer of a process whose gateway the lifespan never built (`runtime.gateway.NotServing`).
NOT_STARTED = ApiError(503, "not_started", "The gateway is not started.")


# Host headers already found in ALLOWED_HOSTS (settings don't change while serving). Only good
# ones are kept, and only so many, so made-up hosts can't grow it.
_GOOD_HOSTS: set[tuple[str | None, str | None]] = set()
_GOOD_HOSTS_MAX = 256


def checked_host(request: HttpRequest) -> ApiError | None:
    key = (request.META.get("HTTP_HOST"), request.META.get("HTTP_X_FORWARDED_HOST"))
    if key in _GOOD_HOSTS:
        return None
    try:
        request.get_host()
    except DisallowedHost:
        return ApiError(400, "invalid_host", "This host name is not served here.")
    if len(_GOOD_HOSTS) < _GOOD_HOSTS_MAX:
        _GOOD_HOSTS.add(key)
    return None


def json_errors(
    view: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    render: Callable[[ApiError], JsonAnswer] = error_response,
) -> Any:
    """The API's last line: an unexpected exception is logged and answered as JSON (by
    `render`, in the endpoint's error shape), never as an HTML page. (The router classifies
    provider failures; reaching this is a bug.)"""

    @functools.wraps(view)
    async def wrapped(request: HttpRequest) -> HttpResponseBase:
        try:
            return await view(request)
        except NotServing as exc:
            logger.error("%s", exc)
            return render(NOT_STARTED)
        except Exception:
            logger.exception("unhandled error in %s", request.path)
            return render(ApiError(500, "internal_error", "Something broke on our side."))

    return wrapped


def wrong_method(
    request: HttpRequest,
    allowed: str,
    render: Callable[[ApiError], JsonAnswer] = error_response,
    message: str = "",
) -> JsonAnswer | None:
    """The 405 (with `Allow`) for a request by another method than `allowed`, or None."""
    if request.method == allowed:
        return None
    error = ApiError(405, "method_not_allowed", message or f"Use {allowed}.")
    return refused(Refusal(error, {"Allow": allowed}), render, request)


def checked_envelope(request: HttpRequest) -> ApiError | None:
    content_type = request.content_type or ""
    if content_type != "application/json":
        return ApiError(
            415, "unsupported_media_type", "Send the body as JSON (Content-Type: application/json)."
        )
    # A declared length over the limit is refused before the body is read (the API handler
    # already did; this holds a request built another way to it too).
    length = request.META.get("CONTENT_LENGTH")
    limit = body_limit_for(request.path)
    if length is not None and (not length.isdigit() or int(length) > limit):
        return body_too_large(request.path)
    return None


def body_of(request: HttpRequest) -> bytes | ApiError:
    """The request's body, read once, or the 413 past its path's limit.

    Read through the request's file interface, never `request.body`: that refuses anything
    over DATA_UPLOAD_MAX_MEMORY_SIZE, the pages' cap, and the API's limits are its own. The
    API handler has held the body to the limit as it arrived (and hands it over in one piece,
    so this read copies nothing); a request built another way is held to it here, reading at
    most one byte past it."""
    limit = body_limit_for(request.path)
    body = request.read(limit + 1)
    return body_too_large(request.path) if len(body) > limit else body


async def caller_of(request: HttpRequest, gateway: Gateway) -> Caller | Refusal:
    """Who is calling (its key, its origin): checked before the body is read, so a caller
    without a valid key learns nothing of the API but that. A key the snapshot doesn't know yet
    is looked up in the database first (bounded: `runtime.key_lookup`). With no
    configuration to check against (its first read failed), the answer is a 503, never a 500,
    and on the ledger."""
    try:
        snapshot = await gateway.snapshots.current()
    except Exception:
        logger.exception("the configuration could not be read to check a caller")
        unrouted = RouteRequest(
            completion=CompletionRequest(prompt=""), request_id=new_request_id()
        )
        failed = unroutable()
        record_call(gateway, unrouted, failed, 0)
        assert failed.error is not None
        return Refusal(
            ApiError(failed.status, failed.error.code, failed.error.message),
            {"X-Request-Id": unrouted.request_id},
        )
    return await identify_or_find(request, snapshot, gateway.snapshots.client_find)


# Request ids are version-7 UUIDs (RFC 9562): the millisecond they were made, then 74 random
# bits. Ordered by time, so the ledger's unique index on them grows at its end, as its index
# on the time does, instead of at a random page of an index that outgrows the database's cache
# (a random id's insert cost the ledger's writer a fifth more CPU on a fresh table, and more as
# it grows). The random bits come from a generator of the process's own, seeded from the OS's
# randomness (and seeded anew in a forked child), not the OS's on every request: a system call
# that hands the GIL to whichever thread wants it (the ledger's writer, under load). An id
# names a request; it is no secret. Not the `random` module's own generator: a test (or
# Hypothesis) may seed that one, and repeat ids.
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)
_VERSION_7 = 0x7 << 76
_VARIANT = 0b10 << 62
_LOW_62 = (1 << 62) - 1


def new_request_id() -> str:
    random_bits = _ids.getrandbits(74)
    value = (
        (time.time_ns() // 1_000_000) << 80
        | _VERSION_7
        | (random_bits >> 62) << 64
        | _VARIANT
        | random_bits & _LOW_62
    )
    # `str(uuid.UUID(int=value))`, without the object made and checked on every request.
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def unroutable() -> RouteResult:
    return RouteResult(
        text="",
        tier=Tier.NONE,
        status=503,
        reason="gateway_error",
        error=RouteError("unavailable", "The gateway can't route requests now."),
    )


@dataclass(frozen=True, slots=True)
class Arrival:
    gateway: Gateway
    caller: Caller
    parsed: Any
    request: HttpRequest
    body: bytes  # as it arrived (b"" before it is read): a refusal's message masks it
    rate: RateTicket | None = None  # its place in its caller's rate window (None: no limit)

    def forbidden(self, *, priority: str = "normal", prefer: str = "") -> Refusal | None:
        """What the caller may not ask for of what the body asks (`access.permitted`)."""
        return permitted(self.caller, prefer=prefer, priority=priority)


async def arrived(
    request: HttpRequest,
    parse: Callable[[bytes], Any],
    render: Callable[[ApiError], JsonAnswer] = error_response,
    *,
    wrong_method_message: str = "",
) -> Arrival | JsonAnswer:
    """A POST's checks in their order (method, host, envelope, the caller's key and rate
    limit, the body), or the refusal in the endpoint's error shape (`render`)."""
    admitted = await _admitted(request, "POST", render, wrong_method_message)
    if not isinstance(admitted, Arrival):
        return admitted
    raw = body_of(request)
    body, parsed = (b"", raw) if isinstance(raw, ApiError) else (raw, parse(raw))
    if isinstance(parsed, ApiError):
        return refused(parsed, render, request, admitted.caller, body)
    return replace(admitted, parsed=parsed, body=body)


async def arrived_to_read(
    request: HttpRequest, render: Callable[[ApiError], JsonAnswer] = error_response
) -> Arrival | JsonAnswer:
    """A GET's checks in the same order (method, host, the caller's key and rate limit; it has
    no body), or the refusal in the endpoint's error shape."""
    return await _admitted(request, "GET", render, "")


async def _admitted(
    request: HttpRequest,
    method: str,
    render: Callable[[ApiError], JsonAnswer],
    wrong_method_message: str,
) -> Arrival | JsonAnswer:
    wrong = wrong_method(request, method, render, wrong_method_message)
    if wrong is not None:
        return wrong
    problem = checked_host(request) or (checked_envelope(request) if method == "POST" else None)
    if problem is not None:
        return refused(problem, render, request)
    gateway = gateway_of(request)
    caller = await caller_of(request, gateway)
    if isinstance(caller, Refusal):
        return refused(caller, render, request)
    # Counted before the body is read: the key alone decides, and a request refused at its
    # limit costs no parsing.
    ticket = await rate_checked(gateway.ports, caller)
    if isinstance(ticket, Refusal):
        return refused(ticket, render, request, caller)
    return Arrival(gateway, caller, None, request, b"", ticket)
