"""`GET /api/v1/status`: the live state of every provider, its budgets and the kill switch.

Spend, caps and breaker state are the operator's: the status needs a client key whose app may
read it, or the session of a staff user signed in to the admin who may see the control room's
live status (`providers.permissions`, the same rule as its page).
"""

from __future__ import annotations

import enum
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest

from edge.api.access import KeyFind, Refusal, identify_or_find, presented_key
from edge.api.arrival import (
    ApiError,
    checked_host,
    error_response,
    json_errors,
    refused,
    wrong_method,
)
from edge.api.json_answer import JsonAnswer
from gateway.engine.breaker import Mode, State
from gateway.engine.config import Snapshot
from gateway.engine.health import (
    DEGRADED,
    DISABLED,
    DOWN,
    HEALTHY,
    LOADING,
    Health,
    provider_health,
)
from gateway.state.contract import Windows, spend_key
from providers.permissions import status_viewer
from runtime.background import run_db
from runtime.gateway import gateway_of

_NUMBER: dict[str, Any] = {"type": "number"}
_BUDGET: dict[str, Any] = {
    "type": "object",
    "required": ["id", "scope", "period", "cap", "currency", "spent", "used_pct"],
    "properties": {
        "id": {"type": "integer"},
        "scope": {"type": "string"},
        "period": {"type": "string"},
        "cap": _NUMBER,
        "currency": {"type": "string"},
        "spent": _NUMBER,
        "used_pct": _NUMBER,
    },
}
_PROVIDER: dict[str, Any] = {
    "type": "object",
    "required": ["name", "kind", "model", "priority", "is_local", "health", "sentinel"],
    "properties": {
        "name": {"type": "string"},
        "kind": {"type": "string"},
        "model": {"type": "string"},
        "priority": {"type": "integer"},
        "is_local": {"type": "boolean"},
        "health": {"enum": [HEALTHY, LOADING, DEGRADED, DOWN, DISABLED]},
        "sentinel": {"enum": [h.value for h in Health]},
        "breaker": {
            "type": "object",
            "required": ["state", "mode", "consecutive_failures", "seconds_to_half_open"],
            "properties": {
                "state": {"enum": [s.value for s in State]},
                "mode": {"enum": [m.value for m in Mode]},
                "reason": {"type": "string"},
                "consecutive_failures": {"type": "integer"},
                "seconds_to_half_open": _NUMBER,
            },
        },
        "window": {
            "type": "object",
            "required": ["seconds", "calls", "failure_rate_pct", "p95_ms", "calls_per_minute"],
            "properties": {
                "seconds": _NUMBER,
                "calls": {"type": "integer"},
                "failure_rate_pct": _NUMBER,
                "p95_ms": {"type": ["number", "null"]},
                "calls_per_minute": _NUMBER,
            },
        },
        "budgets": {"type": "array", "items": _BUDGET},
    },
}
STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every provider's breaker, health and budgets; the kill switch.",
    "required": ["kill_switch", "providers", "budgets", "state_store", "config_version"],
    "properties": {
        "kill_switch": {
            "type": "object",
            "required": ["state", "provider"],
            "properties": {"state": {"type": "string"}, "provider": {"type": ["string", "null"]}},
        },
        "providers": {"type": "array", "items": _PROVIDER},
        "budgets": {"type": "array", "items": _BUDGET},
        "state_store": {
            "type": "object",
            "required": ["backend", "ok"],
            "properties": {"backend": {"type": "string"}, "ok": {"type": "boolean"}},
        },
        "config_version": {"type": "integer"},
    },
}


@json_errors
async def status(request: HttpRequest) -> JsonAnswer:
    wrong = wrong_method(request, "GET")
    if wrong is not None:
        return wrong
    problem = checked_host(request)
    if problem is not None:
        return error_response(problem)
    gateway = gateway_of(request)
    snapshot = await gateway.snapshots.current()
    refusal = await _status_refusal(request, snapshot, gateway.snapshots.client_find)
    if refusal is not None:
        return refused(refusal, error_response, request)
    policy = snapshot.policy
    windows = Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)
    now = gateway.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now, policy.time_zone)[0] for b in snapshot.budgets}
    # Every provider's breaker, verdict and window and every budget's spend: one round trip.
    read = await gateway.store.status_read(
        [provider.name for provider in snapshot.providers],
        windows=windows,
        now=now,
        spend_keys=keys.values(),
    )
    providers = []
    for provider in snapshot.providers:
        state, summary = read.breakers[provider.name], read.summaries[provider.name]
        own = [b for b in snapshot.budgets if b.scope == "provider" and b.provider == provider.name]
        providers.append(
            {
                "name": provider.name,
                "kind": provider.kind,
                "model": provider.model,
                "priority": provider.priority,
                "is_local": provider.is_local,
                # What the control room's status page says too: breaker, window and sentinel.
                "health": provider_health(state, recent_failures=summary.failures),
                "sentinel": state.health,  # the health checks' own verdict (unknown before one)
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
                    _budget_use(b, read.spent.get(keys[b.id], 0.0), policy.currency) for b in own
                ],
            }
        )
    return JsonAnswer(
        {
            "kill_switch": {
                "state": policy.kill_switch,
                "provider": policy.kill_switch_provider or None,
            },
            "providers": providers,
            "budgets": [
                _budget_use(b, read.spent.get(keys[b.id], 0.0), policy.currency)
                for b in snapshot.budgets
                if b.scope == "all"
            ],
            "state_store": gateway.store.health(),
            "config_version": snapshot.version,
        }
    )


async def _status_refusal(
    request: HttpRequest, snapshot: Snapshot, find: KeyFind
) -> Refusal | None:
    if presented_key(request) is not None:
        caller = await identify_or_find(request, snapshot, find)
        if isinstance(caller, Refusal):
            return caller
        if caller.app is None or not caller.app.can_read_status:
            return Refusal(
                ApiError(403, "status_not_allowed", "This client key may not read the status.")
            )
        return None
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if session_key:
        # A database read, for session callers only: a key's caller is judged in memory.
        session: StaffSession = await run_db(staff_session, session_key)
        if session is StaffSession.STATUS_VIEWER:
            return None
        if session is StaffSession.STAFF:
            return Refusal(
                ApiError(
                    403,
                    "status_not_allowed",
                    "This admin user may not read the status: it takes the "
                    '"Can view the live status" permission.',
                )
            )
    return Refusal(
        ApiError(
            401,
            "missing_api_key",
            "The status needs a client key that may read it, or a staff user's admin session.",
        ),
        {"WWW-Authenticate": 'Bearer realm="failover-gateway"'},
    )


class StaffSession(enum.Enum):
    """Who an admin session is, for the status."""

    NONE = "none"  # not signed in, or not an active staff user
    STAFF = "staff"  # staff without the live status's permission
    STATUS_VIEWER = "status_viewer"  # staff who may see the live status


def staff_session(session_key: str) -> StaffSession:
    """Who the session belongs to, as the admin would see it (Django's own checks, a changed
    password ending the session among them), and whether they may see the live status."""
    holder = HttpRequest()
    holder.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(holder)
    if status_viewer(user):
        return StaffSession.STATUS_VIEWER
    if user.is_authenticated and user.is_active and user.is_staff:
        return StaffSession.STAFF
    return StaffSession.NONE


def _budget_use(budget: Any, spent: float, currency: str) -> dict[str, Any]:
    cap = float(budget.cap)
    return {
        "id": budget.id,
        "scope": budget.scope,
        "period": budget.period,
        "cap": cap,
        "currency": "tokens" if budget.unit == "tokens" else currency,
        "spent": round(spent, 6),
        "used_pct": round(100 * spent / cap, 1) if cap else 0.0,
    }
