"""What the live status page shows, read from the shared state (so it is true for every serving
process) and from the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import Count, Q
from django.utils import timezone

from billing.models import Budget, CallRecord
from gateway.engine.breaker import BreakerState, Mode, State
from gateway.engine.config import bucket_width
from gateway.engine.health import DEGRADED, DOWN, LOADING, Health, provider_health
from gateway.state.contract import Windows, WindowSummary, spend_key
from providers.models import FailoverPolicy, Incident, KillSwitch, Provider
from providers.selectors import policy_get
from runtime.gateway import Gateway


@dataclass(frozen=True, slots=True)
class BudgetUse:
    label: str
    spent: float
    cap: float
    currency: str
    used_pct: float

    @property
    def bar_pct(self) -> float:
        return min(100.0, self.used_pct)

    @property
    def summary(self) -> str:
        return f"{self.label}: {self.spent} of {self.cap} {self.currency}"

    @property
    def level(self) -> str:
        return (
            "stop"
            if self.used_pct >= 100
            else "high"
            if self.used_pct >= 85
            else ("warn" if self.used_pct >= 50 else "ok")
        )


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    provider: Provider
    breaker: BreakerState
    window: WindowSummary
    seconds_to_half_open: float
    health: str
    budgets: tuple[BudgetUse, ...] = ()

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def breaker_label(self) -> str:
        if self.breaker.mode == Mode.DISABLED:
            return "forced open"
        if self.breaker.mode == Mode.FORCED_CLOSED:
            return "ignored (forced closed)"
        return self.breaker.state.value.replace("_", "-")


@dataclass(frozen=True, slots=True)
class Serving:
    tier: str  # primary / secondary / static
    provider: str
    why: str


@dataclass(slots=True)
class ControlStatus:
    policy: FailoverPolicy
    providers: list[ProviderStatus]
    serving: Serving
    cloud_share_pct: float | None
    requests_today: int
    incidents: list[Incident]
    state_store: dict[str, Any]
    budgets: list[BudgetUse] = field(default_factory=list)

    @property
    def kill_switch_active(self) -> bool:
        return self.policy.kill_switch != KillSwitch.OFF


def health_of(breaker: BreakerState, window: WindowSummary, enabled: bool) -> str:
    """The provider's health as `GET /api/v1/status` says it too (`provider_health`)."""
    return provider_health(breaker, recent_failures=window.failures, enabled=enabled)


def serving_now(policy: FailoverPolicy, rows: list[ProviderStatus]) -> Serving:
    """Which tier a request would reach now, and why: the kill switch, then the first enabled
    provider whose breaker lets calls through."""
    if policy.kill_switch == KillSwitch.STATIC_ONLY:
        return Serving("static", "", "the kill switch is set to static answers only")
    enabled = [row for row in rows if row.provider.enabled]
    if policy.kill_switch == KillSwitch.FORCE_PROVIDER:
        forced = policy.kill_switch_provider
        name = forced.name if forced is not None else ""
        return Serving("primary" if enabled and enabled[0].name == name else "secondary", name,
                       "the kill switch forces every request to this provider")  # fmt: skip
    passed: list[str] = []
    for index, row in enumerate(enabled):
        if row.health != DOWN:
            tier = "primary" if index == 0 else "secondary"
            why = "the primary is healthy" if index == 0 else "; ".join(passed)
            if row.health == DEGRADED and index == 0:
                why = "the primary is answering, with recent failures"
            if row.health == LOADING and index == 0:
                why = "the primary's model is loading: calls that don't answer in time go on"
            return Serving(tier, row.name, why)
        breaker = row.breaker
        if (
            breaker.mode == Mode.AUTO
            and breaker.health == Health.DOWN
            and breaker.state != State.OPEN
        ):
            passed.append(f"{row.name}: down by its health checks")
            continue
        passed.append(f"{row.name}: breaker {row.breaker_label}"
                      + (f" ({row.breaker.reason})" if row.breaker.reason else ""))  # fmt: skip
    why = "; ".join(passed) if passed else "no provider is enabled"
    return Serving("static", "", f"no provider can take calls — {why}")


def _budget_use(budget: Budget, spent: float, currency: str) -> BudgetUse:
    cap = float(budget.cap)
    client = budget.client_app.name if budget.client_app is not None else "?"
    label = {"all": "all traffic", "provider": "provider", "client": f"client {client}"}[
        budget.scope
    ]
    return BudgetUse(
        label=f"{label}, per {budget.period}",
        spent=round(spent, 4),
        cap=cap,
        currency="tokens" if budget.unit == "tokens" else currency,
        used_pct=round(100 * spent / cap, 1) if cap else 0.0,
    )


def control_status(gateway: Gateway) -> ControlStatus:
    """Everything the status page shows (sync: the admin's views are)."""
    policy = policy_get()
    providers = list(Provider.objects.order_by("priority", "name"))
    budgets = list(Budget.objects.filter(enabled=True).select_related("provider", "client_app"))
    now = gateway.clock.wall()
    keys = {b.pk: spend_key(b.pk, b.period, now, policy.time_zone)[0] for b in budgets}
    windows = Windows(
        bucket_width(policy.failure_window_s, policy.p95_window_s),
        policy.failure_window_s,
        policy.p95_window_s,
    )
    # Every provider and every budget in one round trip, as `GET /api/v1/status` reads them.
    read = async_to_sync(gateway.store.status_read)(
        [provider.name for provider in providers],
        windows=windows,
        now=now,
        spend_keys=keys.values(),
    )
    spent = read.spent
    rows = []
    for provider in providers:
        state, summary = read.breakers[provider.name], read.summaries[provider.name]
        own = [b for b in budgets if b.scope == "provider" and b.provider_id == provider.pk]
        rows.append(
            ProviderStatus(
                provider=provider,
                breaker=state,
                window=summary,
                seconds_to_half_open=round(state.seconds_to_half_open(now)),
                health=health_of(state, summary, provider.enabled),
                budgets=tuple(
                    _budget_use(b, spent.get(keys[b.pk], 0.0), policy.currency) for b in own
                ),
            )
        )
    since = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    cloud = [p.name for p in providers if not p.is_local]
    today = CallRecord.objects.filter(created_at__gte=since).aggregate(
        total=Count("id"), cloud=Count("id", filter=Q(final_provider__in=cloud))
    )
    total = today["total"] or 0
    return ControlStatus(
        policy=policy,
        providers=rows,
        serving=serving_now(policy, rows),
        cloud_share_pct=round(100 * today["cloud"] / total, 1) if total else None,
        requests_today=total,
        incidents=list(Incident.objects.order_by("-started_at")[:8]),
        state_store=gateway.store.health(),
        budgets=[
            _budget_use(b, spent.get(keys[b.pk], 0.0), policy.currency)
            for b in budgets
            if b.scope != "provider"
        ],
    )
