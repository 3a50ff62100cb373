"""`GET /api/v1/status`: the live state of every provider, its budgets and the kill switch."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from failover_site.runtime.gateway import get_gateway
from providers.api.common import ApiError, checked_host, error_response, json_errors
from providers.engine.health import provider_health
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
    keys = {b.id: spend_key(b.id, b.period, now)[0] for b in snapshot.budgets}
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
                "budgets": [_budget_use(b, read.spent.get(keys[b.id], 0.0)) for b in own],
            }
        )
    return JsonResponse(
        {
            "kill_switch": {
                "state": policy.kill_switch,
                "provider": policy.kill_switch_provider or None,
            },
            "providers": providers,
            "budgets": [
                _budget_use(b, read.spent.get(keys[b.id], 0.0))
                for b in snapshot.budgets
                if b.scope == "all"
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
