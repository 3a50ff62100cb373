"""Liveness and readiness probes for load balancers and orchestrators.

`/healthz` answers as long as the process serves requests. `/readyz` also reaches the database
and, when REDIS_URL is configured, Redis; it answers 503 when either is unreachable (or the
process's gateway is not started: a server without the lifespan protocol), so a
balancer takes the process out of rotation rather than sending it traffic. Only a client at one
of `PROBE_DETAIL_ALLOWED_IPS` is told which check failed and why: the error text describes the
services behind the gateway.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import time
from collections.abc import Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from edge.api.access import client_address
from runtime.gateway import NotServing, gateway_of

logger = logging.getLogger(__name__)

# A probe that waits longer than the balancer's own timeout is worse than a clear "no".
CHECK_TIMEOUT_S = 2.0

# The answers' JSON Schemas, as /api/openapi.json documents them.
HEALTHZ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"const": "ok"}},
}
_CHECK: dict[str, Any] = {
    "type": "object",
    "required": ["ok"],
    "properties": {"ok": {"type": "boolean"}, "error": {"type": "string"}},
}
READYZ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The checks and the state store only to PROBE_DETAIL_ALLOWED_IPS.",
    "required": ["status"],
    "properties": {
        "status": {"enum": ["ready", "not_ready"]},
        "checks": {
            "type": "object",
            "required": ["database", "redis"],
            "properties": {"database": _CHECK, "redis": _CHECK},
        },
        "state_store": {"type": "object", "required": ["backend", "ok"]},
    },
}


# A probe changes nothing and reads no form: any other method is a 405 naming GET, not the CSRF
# check's 403 page.
@csrf_exempt
@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@csrf_exempt
@require_GET
async def readyz(request: HttpRequest) -> JsonResponse:
    database, redis_check = await asyncio.gather(_check_database(), _check_redis())
    serving = True
    try:
        # What the router itself last saw of the shared state (memory, or Redis and whether
        # it fell back to local state).
        state_store = gateway_of(request).store.health()
    except NotServing as exc:
        serving = False
        state_store = {"ok": False, "error": "the gateway is not started"}
        logger.error("%s", exc)
    ready = serving and database["ok"] and redis_check["ok"]
    status = 200 if ready else 503
    if not _may_see_detail(client_address(request)):
        return JsonResponse({"status": "ready" if ready else "not_ready"}, status=status)
    if not redis_check["ok"]:
        redis_check["routing"] = "on this process's local state until Redis is back"
    return JsonResponse(
        {
            "status": "ready" if ready else "not_ready",
            "checks": {"database": database, "redis": redis_check},
            "state_store": state_store,
        },
        status=status,
    )


def _may_see_detail(address: str) -> bool:
    return address_allowed(address, settings.PROBE_DETAIL_ALLOWED_IPS)


def address_allowed(address: str, allowed: Sequence[str]) -> bool:
    """Whether a caller's address (`client_address`'s) is in one of the networks `allowed`
    (addresses or CIDRs, as the settings list them; /metrics uses it too)."""
    try:
        client = ipaddress.ip_address(address)
    except ValueError:  # "unknown": no peer address at all
        return False
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped:
        client = client.ipv4_mapped  # a dual-stack socket's view of an IPv4 client
    networks = _detail_networks(tuple(allowed))
    return any(client in network for network in networks)


@functools.cache
def _detail_networks(
    allowed: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in allowed)


def _query_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _check_database() -> dict[str, Any]:
    started = time.perf_counter()
    try:
        await asyncio.wait_for(
            sync_to_async(_query_database, thread_sensitive=True)(), CHECK_TIMEOUT_S
        )
    except TimeoutError:
        return {"ok": False, "vendor": connection.vendor, "error": "timed out"}
    except DatabaseError as exc:
        return {"ok": False, "vendor": connection.vendor, "error": _describe(exc)}
    return {"ok": True, "vendor": connection.vendor, "latency_ms": _elapsed_ms(started)}


async def _check_redis() -> dict[str, Any]:
    if not settings.REDIS_URL:
        return {"ok": True, "configured": False, "state": "in-process"}
    import redis.asyncio as aioredis  # only where Redis is configured (see runtime.gateway)

    started = time.perf_counter()
    client = aioredis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=CHECK_TIMEOUT_S,
        socket_timeout=CHECK_TIMEOUT_S,
    )
    try:
        await asyncio.wait_for(client.ping(), CHECK_TIMEOUT_S)
    except TimeoutError:
        return {"ok": False, "configured": True, "error": "timed out"}
    except (aioredis.RedisError, OSError) as exc:
        return {"ok": False, "configured": True, "error": _describe(exc)}
    finally:
        await client.aclose()
    return {"ok": True, "configured": True, "latency_ms": _elapsed_ms(started)}


def _describe(exc: BaseException) -> str:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
