"""`GET /api/v1/status`: the live state of every provider, its budgets and the kill switch."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from failover_site.runtime.gateway import get_gateway
from providers.api.common import ApiError, checked_host, error_response, json_errors
from providers.state.contract import Windows, spend_key


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
