"""The frontends' JSON endpoints: `POST /api/v1/complete` and `GET /api/v1/status`.

Served by the lean API handler (`failover_site.asgi`): no session, auth or CSRF middleware, so a
request never leaves the event loop. Every failure answers JSON: `{"error": {"code", "message",
"field"?}}` with a 4xx for the client's mistakes; a provider's failure is never the client's 5xx.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils import timezone

from .adapters.base import CompletionRequest
from .background import run_db, spawn
from .gateway import Gateway, get_gateway
from .incidents import note_events
from .router import RouteRequest, RouteResult, route
from .state import Windows, spend_key
from .validation import ApiError, parse_complete

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


@json_errors
async def not_found(request: HttpRequest) -> JsonResponse:
    return error_response(ApiError(404, "not_found", f"No endpoint at {request.path}."))


@json_errors
async def complete(request: HttpRequest) -> JsonResponse:
    started = time.perf_counter()
    if request.method != "POST":
        response = error_response(ApiError(405, "method_not_allowed", "Use POST with a JSON body."))
        response["Allow"] = "POST"
        return response
    problem = checked_host(request)
    if problem is None:
        problem = checked_envelope(request)
    if problem is not None:
        return error_response(problem)
    parsed = parse_complete(request.body)
    if isinstance(parsed, ApiError):
        return error_response(parsed)

    routed = route_request(
        request,
        parsed,
        CompletionRequest(
            prompt=parsed.prompt,
            system_prompt=parsed.system_prompt,
            max_tokens=parsed.max_tokens,
            temperature=parsed.temperature,
        ),
    )
    request_id = routed.request_id
    gateway = get_gateway()
    result = await route_safely(routed, gateway)
    latency_ms = round((time.perf_counter() - started) * 1000)
    record_call(gateway, routed, result, latency_ms)

    headers = failover_headers(result, request_id)
    if result.error is not None:
        body: dict[str, Any] = {"error": {**result.error, "request_id": request_id}}
        return JsonResponse(body, status=result.status, headers=headers)
    return JsonResponse(
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


async def route_safely(routed: RouteRequest, gateway: Gateway) -> RouteResult:
    try:
        return await route(routed, gateway)
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


def note_trouble(result: RouteResult) -> None:
    """Hand what an operator must hear about to the alerts, off the request's path and at most
    once per key every few seconds from this process."""
    if result.tier == "primary" and len(result.attempts) == 1:
        return  # the steady state: nothing to look at
    from alerts.raising import credentials_rejected, request_throttle, static_tier_active

    if (
        result.tier in ("static", "degraded")
        and not result.reason.startswith("kill_switch")
        and request_throttle.allow("static_tier")
    ):
        spawn(_raise(static_tier_active, result.reason))
    for attempt in result.attempts:
        if attempt.error_class == "auth" and request_throttle.allow(f"auth:{attempt.provider}"):
            spawn(_raise(credentials_rejected, attempt.provider, attempt.detail))


async def _raise(raiser: Callable[..., Any], *args: Any) -> None:
    try:
        await run_db(raiser, *args)
    except Exception:
        logger.exception("an alert could not be raised")


def record_call(
    gateway: Gateway, routed: RouteRequest, result: RouteResult, latency_ms: int
) -> None:
    """The request's line in the call ledger, and its breaker events as incidents (both
    buffered; written off the request's path)."""
    if result.events:
        note_events(result.events)
    note_trouble(result)
    prompt = routed.completion.prompt
    gateway.ledger.add(
        {
            "request_id": routed.request_id,
            "created_at": timezone.now(),
            "client": routed.client,
            "priority": routed.priority,
            "task": routed.task,
            "attempts": [attempt.as_dict() for attempt in result.attempts],
            "final_provider": result.provider,
            "tier": result.tier,
            "outcome": result.outcome,
            "reason": result.reason,
            "status": result.status,
            "latency_ms": latency_ms,
            "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out,
            "cost": result.cost,
            "cache_hit": result.cache_hit,
            "static_answer_id": result.static_answer_id,
            "prompt_hash": hashlib.sha256(prompt.encode()).hexdigest(),
            "prompt": prompt if result.store_prompt else "",
        }
    )


@json_errors
async def status(request: HttpRequest) -> JsonResponse:
    if request.method != "GET":
        response = error_response(ApiError(405, "method_not_allowed", "Use GET."))
        response["Allow"] = "GET"
        return response
    problem = checked_host(request)
    if problem is not None:
        return error_response(problem)
    gateway = get_gateway()
    snapshot = await gateway.snapshots.current()
    policy = snapshot.policy
    windows = Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)
    now = gateway.clock.wall()
    providers = []
    for provider in snapshot.providers:
        budgets = [
            b for b in snapshot.budgets if b.scope == "provider" and b.provider == provider.name
        ]
        keys = [spend_key(b.id, b.period, now)[0] for b in budgets]
        state, spent = await gateway.store.read(provider.name, keys)
        summary = await gateway.store.summary(provider.name, windows, now)
        providers.append(
            {
                "name": provider.name,
                "kind": provider.kind,
                "model": provider.model,
                "priority": provider.priority,
                "is_local": provider.is_local,
                "health": state.health,  # the sentinel's verdict (unknown before its first check)
                "breaker": {
                    "state": state.state.value,
                    "mode": state.mode.value,
                    "reason": state.reason,
                    "consecutive_failures": state.consecutive_failures,
                    "seconds_to_half_open": round(state.seconds_to_half_open(now), 1),
                },
                "window": {
                    "seconds": policy.failure_window_s,
                    "calls": summary.calls,
                    "failure_rate_pct": summary.failure_rate_pct,
                    "p95_ms": summary.p95_ms,
                    "calls_per_minute": summary.calls_per_minute,
                },
                "budgets": [
                    _budget_use(b, spent.get(key, 0.0))
                    for b, key in zip(budgets, keys, strict=True)
                ],
            }
        )
    traffic_budgets = [b for b in snapshot.budgets if b.scope == "all"]
    traffic_keys = [spend_key(b.id, b.period, now)[0] for b in traffic_budgets]
    _, traffic_spent = await gateway.store.read("", traffic_keys) if traffic_keys else (None, {})
    return JsonResponse(
        {
            "kill_switch": {
                "state": policy.kill_switch,
                "provider": policy.kill_switch_provider or None,
            },
            "providers": providers,
            "budgets": [
                _budget_use(b, traffic_spent.get(key, 0.0))
                for b, key in zip(traffic_budgets, traffic_keys, strict=True)
            ],
            "state_store": gateway.store.health(),
            "config_version": snapshot.version,
        }
    )


def _budget_use(budget: Any, spent: float) -> dict[str, Any]:
    cap = float(budget.cap)
    return {
        "id": budget.id,
        "scope": budget.scope,
        "period": budget.period,
        "cap": cap,
        "currency": budget.currency,
        "spent": round(spent, 6),
        "used_pct": round(100 * spent / cap, 1) if cap else 0.0,
    }
