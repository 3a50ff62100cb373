"""What the frontends' endpoints share: JSON errors, the host and envelope checks, the routed
request built from a parsed body, and the `X-Failover-*` headers.

Served by the lean API handler (`failover_site.asgi`): no session, auth or CSRF middleware, so a
request never leaves the event loop. Every failure answers JSON, with a 4xx for the client's
mistakes; a provider's failure is never the client's 5xx.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from providers.adapters.messages import CompletionRequest
from providers.api.validation import ApiError
from providers.routing.cascade import RouteRequest, RouteResult, route
from providers.routing.ports import Runtime

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024


def error_response(error: ApiError) -> JsonResponse:
    return JsonResponse({"error": error.as_dict()}, status=error.status)


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
    render: Callable[[ApiError], JsonResponse] = error_response,
) -> Any:
    """The API's last line: an unexpected exception is logged and answered as JSON (by
    `render`, in the endpoint's error shape), never as an HTML page. (The router classifies
    provider failures; reaching this is a bug.)"""

    @functools.wraps(view)
    async def wrapped(request: HttpRequest) -> HttpResponseBase:
        try:
            return await view(request)
        except Exception:
            logger.exception("unhandled error in %s", request.path)
            return render(ApiError(500, "internal_error", "Something broke on our side."))

    return wrapped


def checked_envelope(request: HttpRequest) -> ApiError | None:
    content_type = request.content_type or ""
    if content_type != "application/json":
        return ApiError(
            415, "unsupported_media_type", "Send the body as JSON (Content-Type: application/json)."
        )
    length = request.META.get("CONTENT_LENGTH")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        return ApiError(413, "body_too_large", f"The body may be at most {MAX_BODY_BYTES} bytes.")
    if len(request.body) > MAX_BODY_BYTES:
        return ApiError(413, "body_too_large", f"The body may be at most {MAX_BODY_BYTES} bytes.")
    return None


def route_request(
    request: HttpRequest, parsed: Any, completion: CompletionRequest, **extra: Any
) -> RouteRequest:
    """The request to route, with the gateway's own fields both endpoints take (priority,
    task, allow_cloud, cache, user) and the caller's `X-Client-Id`."""
    client = request.headers.get("X-Client-Id", "")[:100]
    return RouteRequest(
        completion=completion,
        request_id=str(uuid.uuid4()),
        priority=parsed.priority,
        task=parsed.task,
        allow_cloud=parsed.allow_cloud,
        client=client,
        use_cache=parsed.cache,
        sticky_key=parsed.user or client,
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
        return RouteResult(
            text="",
            tier="none",
            status=503,
            reason="gateway_error",
            error={"code": "unavailable", "message": "The gateway can't route requests now."},
        )


def failover_headers(result: RouteResult, request_id: str) -> dict[str, str]:
    headers = {
        "X-Request-Id": request_id,
        "X-Failover-Tier": result.tier,
        "X-Failover-Provider": result.provider or result.tier,
    }
    if result.cached_age_s is not None:
        headers["X-Failover-Cache-Age"] = str(result.cached_age_s)
    return headers
