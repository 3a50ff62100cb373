"""Liveness and readiness probes for load balancers and orchestrators.

`/healthz` answers as long as the process serves requests. `/readyz` also reaches the database
and, when REDIS_URL is configured, Redis; it answers 503 with the failing check named when either
is unreachable, so a balancer takes the process out of rotation rather than sending it traffic.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from failover_site.runtime.gateway import get_gateway

# A probe that waits longer than the balancer's own timeout is worse than a clear "no".
CHECK_TIMEOUT_S = 2.0


@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
async def readyz(request: HttpRequest) -> JsonResponse:
    database, redis_check = await asyncio.gather(_check_database(), _check_redis())
    if not redis_check["ok"]:
        redis_check["routing"] = "on this process's local state until Redis is back"
    checks = {"database": database, "redis": redis_check}
    ready = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {
            "status": "ready" if ready else "not_ready",
            "checks": checks,
            # What the router itself last saw of the shared state (memory, or Redis and
            # whether it fell back to local state).
            "state_store": get_gateway().store.health(),
        },
        status=200 if ready else 503,
    )


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
