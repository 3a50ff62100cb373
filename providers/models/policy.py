"""The failover policy: one row holding every threshold, the kill switch and the degradation
message, edited in the admin and read by the engine through the snapshot."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from gateway.engine.config import DEFAULT_DEGRADATION_MESSAGE
from providers.models.client_app import origin_list_validator
from providers.models.policy_breaker import BreakerPolicy
from providers.models.policy_money import MoneyPolicy
from providers.models.provider import Provider
from providers.models.validators import TASK_NAME, at_least, percent


class Strategy(models.TextChoices):
    PRIORITY = "priority", "Priority failover: one provider at a time, in priority order"
    HEDGED = "hedged", "Hedged: also ask the next provider when the first is slow"
    WEIGHTED = "weighted", "Weighted: same-priority providers share traffic by weight"


class CacheMode(models.TextChoices):
    FALLBACK = "fallback", "Fallback: serve saved answers only when every provider fails"
    COST_SAVER = "cost_saver", "Cost saver: serve a saved answer before asking a provider"
    OFF = "off", "Off: neither save nor serve answers"


class KillSwitch(models.TextChoices):
    OFF = "off", "Off: normal routing"
    STATIC_ONLY = "static_only", "Static answers only: no upstream call"
    FORCE_PROVIDER = "force_provider", "Force one provider"


def default_degradation_message() -> str:
    return DEFAULT_DEGRADATION_MESSAGE


class FailoverPolicy(BreakerPolicy, MoneyPolicy):
    """Every threshold of the breakers, the sentinel, budgets and alerts: exactly one row."""

    SINGLETON_ID = 1
    KILL_SWITCH_FIELDS = ("kill_switch", "kill_switch_provider", "kill_switch_reason")
    # How the fields are laid out, for the admin's page and the control room's thresholds
    # editor alike. A field the engine reads also goes in `PolicyConfig`
    # (`gateway.engine.config`), which the snapshot fills from the row by name; the tests
    # check that every field is in both places, or named as the control plane's own.
    FIELD_GROUPS: tuple[tuple[str, tuple[str | tuple[str, ...], ...]], ...] = (
        ("Kill switch", KILL_SWITCH_FIELDS),
        (
            "Circuit breaker",
            (
                "consecutive_failures",
                ("failure_rate_pct", "failure_window_s", "failure_min_calls"),
                ("slow_call_s", "slow_call_rate_pct"),
                ("p95_latency_s", "p95_window_s"),
                ("stuck_multiplier", "stuck_floor_s", "stuck_cap_s"),
                "first_byte_bound_s",
                ("cooldown_s", "cooldown_multiplier", "max_cooldown_s"),
                "half_open_probes",
                "non_compliant_is_failure",
            ),
        ),
        (
            "Health sentinel",
            (
                ("sentinel_interval_s", "sentinel_check_timeout_s"),
                ("sentinel_window", "sentinel_degraded_after"),
                ("sentinel_down_after_s", "model_load_grace_s"),
                "sentinel_paid_probe",
                # The keepalive's pings count as the secondary's health checks.
                ("keepalive_enabled", "keepalive_interval_s"),
            ),
        ),
        (
            "Requests",
            (
                ("request_deadline_s", "first_token_timeout_s"),
                ("strategy", "hedge_after_ms"),
                "local_only_tasks",
                "no_fallback_tasks",
            ),
        ),
        ("Alerts", ("alert_cooldown_s", "flap_window_s")),
        (
            "Anonymous access",
            (
                "anonymous_access",
                ("anonymous_requests_per_minute", "anonymous_tokens_per_minute"),
                "anonymous_origins",
                "anonymous_allow_cloud",
            ),
        ),
        (
            "Money and reports",
            (
                ("currency", "time_zone"),
                ("cloud_share_target_pct", "static_coverage_target_pct"),
                "ledger_retention_days",
            ),
        ),
        (
            "Cache and static answers",
            (
                ("cache_mode", "cache_ttl_s"),
                "static_match_threshold",
                "degradation_message",
                "store_prompts",
            ),
        ),
    )
    # Fields only the control plane reads (the alerts' policy, the switch's own record).
    NOT_IN_SNAPSHOT = ("id", "updated_at", "kill_switch_reason", "alert_cooldown_s",
                       "flap_window_s", "static_coverage_target_pct",
                       "ledger_retention_days")  # fmt: skip

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)

    # Kill switch
    kill_switch = models.CharField(
        max_length=16, choices=KillSwitch.choices, default=KillSwitch.OFF
    )
    kill_switch_provider = models.ForeignKey(
        Provider,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The provider that takes all traffic when the switch forces one.",
    )
    kill_switch_reason = models.TextField(
        blank=True, help_text="Why the switch is set; required whenever it is not off."
    )

    # Health sentinel
    sentinel_interval_s = models.PositiveIntegerField(
        "sentinel interval (s)", default=30, validators=at_least(1, "The sentinel interval")
    )
    sentinel_window = models.PositiveSmallIntegerField(
        "sentinel window (checks)", default=5, validators=at_least(1, "The sentinel window")
    )
    sentinel_degraded_after = models.PositiveSmallIntegerField(
        "bad checks → degraded",
        default=3,
        validators=at_least(1, "Bad checks before degraded"),
    )
    sentinel_down_after_s = models.PositiveIntegerField(
        "degraded → down after (s)",
        default=300,
        validators=at_least(1, "The time from degraded to down"),
    )
    model_load_grace_s = models.PositiveIntegerField(
        "a model may load for (s)",
        default=120,
        validators=at_least(1, "The model load grace"),
        help_text="A self-hosted model that is loading (answering slowly while not yet in "
        "Ollama's /api/ps) is not counted as failing for this long; past it, a load that "
        "never ends counts like any failed check.",
    )
    sentinel_check_timeout_s = models.FloatField(
        "check timeout (s)",
        default=5.0,
        validators=[
            MinValueValidator(0.1, "The check timeout must be at least 0.1 s."),
            MaxValueValidator(60, "The check timeout must be at most 60 s."),
        ],
    )
    sentinel_paid_probe = models.BooleanField(
        "one-token probe on paid providers too",
        default=False,
        help_text="Self-hosted providers always get a one-token inference check; with this on, "
        "cloud providers get one too (it costs a token per check).",
    )

    # Warm keepalive
    keepalive_enabled = models.BooleanField(
        "keep the secondary warm",
        default=False,
        help_text="While the primary is healthy and the secondary carries no traffic, send the "
        "secondary a one-token request now and then, so it answers fast when it is needed.",
    )
    keepalive_interval_s = models.PositiveIntegerField(
        "keepalive interval (s)",
        default=180,
        validators=at_least(30, "The keepalive interval"),
    )

    # Requests
    request_deadline_s = models.FloatField(
        "request deadline (s)", default=30.0, validators=at_least(0.1, "The request deadline")
    )
    first_token_timeout_s = models.FloatField(
        "time to first token (s)",
        default=10.0,
        validators=[
            MinValueValidator(0.1, "The time to first token must be at least 0.1 s."),
            MaxValueValidator(600, "The time to first token must be at most 600 s."),
        ],
        help_text="A streamed answer whose first token takes longer fails over to the next "
        "provider before anything reaches the client.",
    )

    # Strategy
    strategy = models.CharField(max_length=16, choices=Strategy.choices, default=Strategy.PRIORITY)
    hedge_after_ms = models.PositiveIntegerField(
        "hedge after (ms)",
        default=2000,
        validators=[
            MinValueValidator(10, "Hedge after must be at least 10 ms."),
            MaxValueValidator(600_000, "Hedge after must be at most 600000 ms."),
        ],
        help_text="Hedged strategy: when the first provider hasn't answered in this time, the "
        "next one is asked too and the first good answer wins.",
    )

    # Task rules: a task is a label the frontend sends with a request ("summarize", "legal")
    local_only_tasks = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Comma-separated tasks that never leave self-hosted providers: when those "
        "fail, the request falls to the static answers, never to the cloud.",
    )
    no_fallback_tasks = models.CharField(
        "tasks answered 503 rather than degraded",
        max_length=1000,
        blank=True,
        help_text="Comma-separated tasks where a wrong answer is worse than none: when every "
        "provider fails they get a 503, not a cached, static or degraded answer.",
    )

    # Alerts
    alert_cooldown_s = models.PositiveIntegerField(
        "alert cooldown (s)", default=600, validators=at_least(1, "The alert cooldown")
    )
    flap_window_s = models.PositiveIntegerField(
        "flap window (s)", default=60, validators=at_least(1, "The flap window")
    )

    # Anonymous access: a public website widget calling without a key
    anonymous_access = models.BooleanField(
        default=False,
        help_text="Answer requests that carry no client key (a public website widget), with "
        "the per-address limits below. Off: every request needs a client app's key.",
    )
    anonymous_requests_per_minute = models.PositiveIntegerField(
        "anonymous requests per minute, per address",
        default=10,
        validators=at_least(1, "Anonymous requests per minute"),
    )
    anonymous_tokens_per_minute = models.PositiveIntegerField(
        "anonymous tokens per minute, per address",
        default=20_000,
        help_text="0 for no token limit.",
    )
    anonymous_origins = models.TextField(
        "anonymous origins",
        blank=True,
        validators=[origin_list_validator],
        help_text="The browser origins the widget runs on, one per line (e.g. "
        "https://www.example.com). When set, an anonymous request must come from one of "
        "them. An Origin header is easy to forge outside a browser: the per-address limits "
        "are what hold.",
    )
    anonymous_allow_cloud = models.BooleanField(
        default=False,
        help_text="Whether anonymous requests may reach paid cloud providers.",
    )

    # The cache and the static tier
    cache_mode = models.CharField(
        "answer cache", max_length=16, choices=CacheMode.choices, default=CacheMode.FALLBACK
    )
    cache_ttl_s = models.PositiveIntegerField(
        "answer cache TTL (s)",
        default=86_400,
        validators=at_least(1, "The cache TTL"),
        help_text="How long a good answer is kept to be served again.",
    )
    static_match_threshold = models.PositiveSmallIntegerField(
        "static match threshold (score)",
        default=85,
        validators=percent("The static match threshold"),
        help_text="Fuzzy score (0–100) a question needs to get a static answer.",
    )
    degradation_message = models.TextField(default=default_degradation_message, max_length=2000)
    store_prompts = models.BooleanField(
        default=False,
        help_text="Keep prompts in the call ledger (a hash is always kept).",
    )

    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "failover policy"
        verbose_name_plural = "failover policy"
        permissions = [
            ("flip_kill_switch", "Can flip the kill switch"),
            # The control room's live status: spend, breakers and incidents, every provider.
            ("view_status", "Can view the live status"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="failover_policy_singleton"),
        ]

    def __str__(self) -> str:
        return "Failover policy"

    @staticmethod
    def task_list(value: str) -> list[str]:
        return [task.strip() for task in value.split(",") if task.strip()]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for name in ("local_only_tasks", "no_fallback_tasks"):
            bad = [t for t in self.task_list(getattr(self, name)) if not TASK_NAME.fullmatch(t)]
            if bad:
                errors[name] = (
                    f"Task names are letters, digits, '.', '_' and '-' (not: {', '.join(bad)})."
                )
        if (
            self.cooldown_s is not None
            and self.max_cooldown_s is not None
            and self.max_cooldown_s < self.cooldown_s
        ):
            errors["max_cooldown_s"] = (
                f"The maximum cooldown ({self.max_cooldown_s} s) cannot be below the base "
                f"cooldown ({self.cooldown_s} s)."
            )
        if (
            self.stuck_floor_s is not None
            and self.stuck_cap_s is not None
            and self.stuck_cap_s < self.stuck_floor_s
        ):
            errors["stuck_cap_s"] = (
                f"A call can't be stuck at most after {self.stuck_cap_s:g} s but at least after "
                f"{self.stuck_floor_s:g} s."
            )
        if (
            self.sentinel_degraded_after is not None
            and self.sentinel_window  # a zero window is reported on its own field
            and self.sentinel_degraded_after > self.sentinel_window
        ):
            errors["sentinel_degraded_after"] = (
                f"Bad checks before degraded ({self.sentinel_degraded_after}) cannot exceed the "
                f"sentinel window ({self.sentinel_window} checks)."
            )
        if self.kill_switch == KillSwitch.FORCE_PROVIDER and self.kill_switch_provider_id is None:
            errors["kill_switch_provider"] = "Choose the provider that should take all traffic."
        elif (
            self.kill_switch == KillSwitch.FORCE_PROVIDER
            and self.kill_switch_provider_id is not None
            and not Provider.objects.filter(pk=self.kill_switch_provider_id, enabled=True).exists()
        ):
            errors["kill_switch_provider"] = (
                "That provider is disabled: forcing traffic to it would send every request to "
                "the static answers. Enable it first, or choose static answers only."
            )
        if self.kill_switch != KillSwitch.FORCE_PROVIDER and self.kill_switch_provider_id:
            errors["kill_switch_provider"] = "Only a switch that forces a provider names one."
        if self.kill_switch != KillSwitch.OFF and not self.kill_switch_reason.strip():
            errors["kill_switch_reason"] = "Say why the kill switch is set."
        if not (self.degradation_message or "").strip():
            errors["degradation_message"] = "The degradation message cannot be empty."
        if errors:
            raise ValidationError(errors)
