"""The immutable configuration the router reads: providers, policy, budgets and static answers.

Built from the database when the config version moves, then swapped in whole, so a request in
steady state reads plain Python objects and runs no SQL. Keys are resolved from the environment
here, once, and never stored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal

from .faq import FaqEntry, FaqIndex


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    kind: str
    base_url: str
    model: str
    priority: int
    is_local: bool
    timeout_s: float
    context_window: int
    weight: int = 100
    price_input_per_1m: Decimal = Decimal("0")
    price_output_per_1m: Decimal = Decimal("0")
    api_key: str = field(default="", repr=False)
    api_key_env: str = ""  # the variable's name: a provider that names one needs it set

    @property
    def http_base_url(self) -> str:
        """The origin the adapter's paths are appended to (a trailing /v1 is the adapter's)."""
        base = self.base_url.rstrip("/")
        return base[:-3] if base.endswith("/v1") else base

    def cost(self, tokens_in: int, tokens_out: int) -> Decimal:
        return (
            self.price_input_per_1m * tokens_in + self.price_output_per_1m * tokens_out
        ) / 1_000_000


def bucket_width(failure_window_s: int, p95_window_s: int) -> int:
    """Width of the breaker's statistics buckets: at most ~120 buckets per window."""
    return max(1, -(-max(failure_window_s, p95_window_s) // 120))


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    consecutive_failures: int = 3
    failure_rate_pct: float = 30
    failure_window_s: int = 60
    failure_min_calls: int = 5
    slow_call_s: float = 8.0
    slow_call_rate_pct: float = 50
    p95_latency_s: float = 5.0
    p95_window_s: int = 120
    cooldown_s: int = 60
    cooldown_multiplier: float = 2.0
    max_cooldown_s: int = 600
    half_open_probes: int = 3
    request_deadline_s: float = 30.0
    static_match_threshold: int = 85
    kill_switch: str = "off"
    kill_switch_provider: str = ""
    degradation_message: str = "Sorry, the assistant is unavailable right now."
    store_prompts: bool = False
    local_only_tasks: frozenset[str] = frozenset()
    no_fallback_tasks: frozenset[str] = frozenset()
    cache_ttl_s: int = 86_400
    cache_mode: str = "fallback"  # fallback / cost_saver / off
    cloud_share_target_pct: float = 5.0
    first_token_timeout_s: float = 10.0
    strategy: str = "priority"  # priority / hedged / weighted
    hedge_after_ms: int = 2000
    # The health sentinel (DESIGN.md, "Breaker") and the warm keepalive.
    sentinel_interval_s: int = 30
    sentinel_window: int = 5
    sentinel_degraded_after: int = 3
    sentinel_down_after_s: int = 300
    sentinel_check_timeout_s: float = 5.0
    sentinel_paid_probe: bool = False
    keepalive_enabled: bool = False
    keepalive_interval_s: int = 180

    @property
    def bucket_s(self) -> int:
        return bucket_width(self.failure_window_s, self.p95_window_s)


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    id: int
    scope: str  # all / provider / client
    period: str  # day / month
    cap: Decimal
    currency: str
    warn_pct: int
    high_priority_only_pct: int
    hard_stop_pct: int
    provider: str = ""
    client: str = ""

    def applies_to(self, provider: ProviderConfig, client: str) -> bool:
        if self.scope == "provider":
            return self.provider == provider.name
        if self.scope == "client":
            return self.client == client and not provider.is_local
        # Local providers are never blocked by a cloud budget.
        return not provider.is_local


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    providers: tuple[ProviderConfig, ...]  # enabled ones, by priority
    policy: PolicyConfig
    budgets: tuple[BudgetConfig, ...] = ()
    faq: FaqIndex = field(default_factory=lambda: FaqIndex(()))

    @property
    def primary(self) -> ProviderConfig | None:
        return self.providers[0] if self.providers else None

    def provider(self, name: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.name == name), None)


def build_snapshot(version: int) -> Snapshot:
    """Read the control plane from the database (sync: call it off the event loop)."""
    from billing.models import Budget

    from .models import FailoverPolicy, Provider
    from .selectors import policy_get

    policy_row = policy_get()
    forced = ""
    if policy_row.kill_switch_provider_id is not None:
        forced = (
            Provider.objects.filter(pk=policy_row.kill_switch_provider_id)
            .values_list("name", flat=True)
            .first()
            or ""
        )
    policy = PolicyConfig(
        consecutive_failures=policy_row.consecutive_failures,
        failure_rate_pct=policy_row.failure_rate_pct,
        failure_window_s=policy_row.failure_window_s,
        failure_min_calls=policy_row.failure_min_calls,
        slow_call_s=policy_row.slow_call_s,
        slow_call_rate_pct=policy_row.slow_call_rate_pct,
        p95_latency_s=policy_row.p95_latency_s,
        p95_window_s=policy_row.p95_window_s,
        cooldown_s=policy_row.cooldown_s,
        cooldown_multiplier=policy_row.cooldown_multiplier,
        max_cooldown_s=policy_row.max_cooldown_s,
        half_open_probes=policy_row.half_open_probes,
        request_deadline_s=policy_row.request_deadline_s,
        static_match_threshold=policy_row.static_match_threshold,
        kill_switch=policy_row.kill_switch,
        kill_switch_provider=forced,
        degradation_message=policy_row.degradation_message,
        store_prompts=policy_row.store_prompts,
        local_only_tasks=frozenset(FailoverPolicy.task_list(policy_row.local_only_tasks)),
        no_fallback_tasks=frozenset(FailoverPolicy.task_list(policy_row.no_fallback_tasks)),
        cache_ttl_s=policy_row.cache_ttl_s,
        cache_mode=policy_row.cache_mode,
        first_token_timeout_s=policy_row.first_token_timeout_s,
        strategy=policy_row.strategy,
        hedge_after_ms=policy_row.hedge_after_ms,
        cloud_share_target_pct=policy_row.cloud_share_target_pct,
        sentinel_interval_s=policy_row.sentinel_interval_s,
        sentinel_window=policy_row.sentinel_window,
        sentinel_degraded_after=policy_row.sentinel_degraded_after,
        sentinel_down_after_s=policy_row.sentinel_down_after_s,
        sentinel_check_timeout_s=policy_row.sentinel_check_timeout_s,
        sentinel_paid_probe=policy_row.sentinel_paid_probe,
        keepalive_enabled=policy_row.keepalive_enabled,
        keepalive_interval_s=policy_row.keepalive_interval_s,
    )
    providers = tuple(
        ProviderConfig(
            name=row.name,
            kind=row.kind,
            base_url=row.base_url,
            model=row.model,
            priority=row.priority,
            is_local=row.is_local,
            timeout_s=row.timeout_s,
            context_window=row.context_window,
            weight=row.weight,
            price_input_per_1m=row.price_input_per_1m,
            price_output_per_1m=row.price_output_per_1m,
            api_key=os.environ.get(row.api_key_env, "") if row.api_key_env else "",
            api_key_env=row.api_key_env,
        )
        for row in Provider.objects.filter(enabled=True).order_by("priority", "name")
    )
    budgets = tuple(
        BudgetConfig(
            id=row.pk,
            scope=row.scope,
            period=row.period,
            cap=row.cap,
            currency=row.currency,
            warn_pct=row.warn_pct,
            high_priority_only_pct=row.high_priority_only_pct,
            hard_stop_pct=row.hard_stop_pct,
            provider=row.provider.name if row.provider is not None else "",
            client=row.client,
        )
        for row in Budget.objects.filter(enabled=True).select_related("provider")
    )
    return Snapshot(
        version=version,
        providers=providers,
        policy=policy,
        budgets=budgets,
        faq=faq_index_build(),
    )


def faq_index_build() -> FaqIndex:
    """The static tier's index over the enabled answers as they are in the database now."""
    from .models import StaticAnswer

    return FaqIndex(
        tuple(
            FaqEntry(answer_id=row.pk, answer=row.answer, phrasings=tuple(row.phrasings))
            for row in StaticAnswer.objects.filter(enabled=True).order_by("pk")
        )
    )
