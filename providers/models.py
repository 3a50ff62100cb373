"""The control plane's data: the provider registry, the failover policy, the static answers and
the record of every operator change.

Models hold data and small properties; writes go through `providers.services`.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
    URLValidator,
)
from django.db import models
from django.db.models import Q
from django.utils import timezone

http_url_validator = URLValidator(
    schemes=["http", "https"],
    message="Enter an http:// or https:// URL.",
    # Its own code, so a form doesn't swap the message for its generic "Enter a valid URL."
    code="invalid_url_scheme",
)
env_var_name_validator = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$",
    "Enter the name of an environment variable (capitals, digits and underscores, "
    "e.g. OPENAI_API_KEY), not the key itself.",
    code="invalid_env_var_name",
)


# What a task name may be, here and in a request's "task" field.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _percent(field_label: str) -> list:
    return [
        MinValueValidator(0, f"{field_label} must be between 0 and 100."),
        MaxValueValidator(100, f"{field_label} must be between 0 and 100."),
    ]


def _at_least(minimum: float, field_label: str) -> list:
    return [MinValueValidator(minimum, f"{field_label} must be at least {minimum}.")]


class ProviderKind(models.TextChoices):
    OLLAMA = "ollama", "Ollama"
    OPENAI_COMPATIBLE = "openai", "OpenAI-compatible"
    ANTHROPIC = "anthropic", "Anthropic"


class Provider(models.Model):
    """One upstream model endpoint the router may send a request to."""

    name = models.SlugField(
        max_length=64, unique=True, help_text="Short unique name, used in headers and the ledger."
    )
    kind = models.CharField(max_length=16, choices=ProviderKind.choices)
    base_url = models.URLField(
        "base URL",
        max_length=500,
        validators=[http_url_validator],
        help_text="e.g. http://127.0.0.1:11434 for Ollama, https://api.openai.com for OpenAI.",
    )
    model = models.CharField(max_length=200, help_text="The model name the provider expects.")
    api_key_env = models.CharField(
        "API key variable",
        max_length=100,
        blank=True,
        validators=[env_var_name_validator],
        help_text="Name of the environment variable holding the API key. "
        "The key itself never enters the database.",
    )
    priority = models.PositiveSmallIntegerField(
        default=100, help_text="Lower goes first. The lowest enabled provider is the primary."
    )
    weight = models.PositiveSmallIntegerField(
        default=100,
        validators=[
            MinValueValidator(1, "The weight must be at least 1."),
            MaxValueValidator(10_000, "The weight must be at most 10000."),
        ],
        help_text="With the weighted strategy, providers of the same priority share traffic in "
        "proportion to their weights (each user stays on one of them).",
    )
    enabled = models.BooleanField(default=True)
    is_local = models.BooleanField(
        "self-hosted",
        default=False,
        help_text="Self-hosted (local) rather than a cloud API: local-only traffic may use it "
        "and cloud budgets never block it.",
    )
    timeout_s = models.FloatField(
        "timeout (s)",
        default=15.0,
        validators=[
            MinValueValidator(0.1, "The timeout must be at least 0.1 s."),
            MaxValueValidator(600, "The timeout must be at most 600 s."),
        ],
    )
    context_window = models.PositiveIntegerField(
        default=8192,
        validators=_at_least(256, "The context window"),
        help_text="In tokens.",
    )
    price_input_per_1m = models.DecimalField(
        "price per 1M input tokens",
        max_digits=12,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"), "A price cannot be negative.")],
    )
    price_output_per_1m = models.DecimalField(
        "price per 1M output tokens",
        max_digits=12,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"), "A price cannot be negative.")],
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["priority", "name"]
        indexes = [models.Index(fields=["enabled", "priority"], name="provider_enabled_prio")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()}, {self.model})"

    @property
    def api_key_configured(self) -> bool:
        """Whether the named variable is set in this process, without reading it out."""
        return bool(self.api_key_env and os.environ.get(self.api_key_env))


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
    return (
        "Sorry, our assistant is temporarily unavailable. Please try again in a few minutes, "
        "or contact support@brightline.example if it's urgent."
    )


class FailoverPolicy(models.Model):
    """Every threshold of the breakers, the sentinel, budgets and alerts: exactly one row."""

    SINGLETON_ID = 1

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

    # Breaker (DESIGN.md: "Breaker")
    consecutive_failures = models.PositiveSmallIntegerField(
        default=3, validators=_at_least(1, "Consecutive failures")
    )
    failure_rate_pct = models.PositiveSmallIntegerField(
        "failure rate (%)", default=30, validators=_percent("The failure rate")
    )
    failure_window_s = models.PositiveIntegerField(
        "failure window (s)", default=60, validators=_at_least(1, "The failure window")
    )
    failure_min_calls = models.PositiveSmallIntegerField(
        "minimum calls in the window", default=5, validators=_at_least(1, "The minimum calls")
    )
    slow_call_s = models.FloatField(
        "slow call (s)", default=8.0, validators=_at_least(0.1, "The slow-call threshold")
    )
    slow_call_rate_pct = models.PositiveSmallIntegerField(
        "slow-call rate (%)", default=50, validators=_percent("The slow-call rate")
    )
    p95_latency_s = models.FloatField(
        "p95 latency limit (s)", default=5.0, validators=_at_least(0.1, "The p95 limit")
    )
    p95_window_s = models.PositiveIntegerField(
        "p95 window (s)", default=120, validators=_at_least(1, "The p95 window")
    )
    cooldown_s = models.PositiveIntegerField(
        "cooldown (s)", default=60, validators=_at_least(1, "The cooldown")
    )
    cooldown_multiplier = models.FloatField(
        default=2.0, validators=_at_least(1, "The cooldown multiplier")
    )
    max_cooldown_s = models.PositiveIntegerField(
        "maximum cooldown (s)", default=600, validators=_at_least(1, "The maximum cooldown")
    )
    half_open_probes = models.PositiveSmallIntegerField(
        default=3, validators=_at_least(1, "Half-open probes")
    )

    # Health sentinel
    sentinel_interval_s = models.PositiveIntegerField(
        "sentinel interval (s)", default=30, validators=_at_least(1, "The sentinel interval")
    )
    sentinel_window = models.PositiveSmallIntegerField(
        "sentinel window (checks)", default=5, validators=_at_least(1, "The sentinel window")
    )
    sentinel_degraded_after = models.PositiveSmallIntegerField(
        "bad checks → degraded",
        default=3,
        validators=_at_least(1, "Bad checks before degraded"),
    )
    sentinel_down_after_s = models.PositiveIntegerField(
        "degraded → down after (s)",
        default=300,
        validators=_at_least(1, "The time from degraded to down"),
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
        validators=_at_least(30, "The keepalive interval"),
    )

    # Requests
    request_deadline_s = models.FloatField(
        "request deadline (s)", default=30.0, validators=_at_least(0.1, "The request deadline")
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
        "alert cooldown (s)", default=600, validators=_at_least(1, "The alert cooldown")
    )
    flap_window_s = models.PositiveIntegerField(
        "flap window (s)", default=60, validators=_at_least(1, "The flap window")
    )

    # Cost, cache and the static tier
    cloud_share_target_pct = models.FloatField(
        "cloud share target (%)", default=5.0, validators=_percent("The cloud share target")
    )
    cache_mode = models.CharField(
        "answer cache", max_length=16, choices=CacheMode.choices, default=CacheMode.FALLBACK
    )
    cache_ttl_s = models.PositiveIntegerField(
        "answer cache TTL (s)",
        default=86_400,
        validators=_at_least(1, "The cache TTL"),
        help_text="How long a good answer is kept to be served again.",
    )
    static_match_threshold = models.PositiveSmallIntegerField(
        "static match threshold (score)",
        default=85,
        validators=_percent("The static match threshold"),
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
        permissions = [("flip_kill_switch", "Can flip the kill switch")]
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


class StaticAnswer(models.Model):
    """A question the static tier can answer without any provider."""

    question = models.CharField(max_length=300, unique=True)
    alternative_phrasings = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(8000)],
        help_text="Other ways people ask the same question, one per line.",
    )
    # A TextField's max_length only shapes forms: the validator holds it for every write.
    answer = models.TextField(max_length=4000, validators=[MaxLengthValidator(4000)])
    enabled = models.BooleanField(default=True)
    hit_count = models.PositiveIntegerField(default=0, editable=False)
    last_hit_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
    )

    class Meta:
        ordering = ["question"]
        indexes = [models.Index(fields=["enabled"], name="static_answer_enabled")]

    def __str__(self) -> str:
        return self.question

    @property
    def phrasings(self) -> list[str]:
        """The question and every alternative phrasing, in order, without blanks."""
        alternatives = [line.strip() for line in self.alternative_phrasings.splitlines()]
        return [self.question.strip(), *(line for line in alternatives if line)]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if not self.question.strip():
            errors["question"] = "The question cannot be blank."
        if not self.answer.strip():
            errors["answer"] = "The answer cannot be blank."
        lines = [line.strip() for line in self.alternative_phrasings.splitlines() if line.strip()]
        if any(len(line) > 300 for line in lines):
            errors["alternative_phrasings"] = "Each phrasing must be at most 300 characters."
        elif len({line.casefold() for line in lines}) != len(lines):
            errors["alternative_phrasings"] = "A phrasing is listed twice."
        if errors:
            raise ValidationError(errors)


class ChangeAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"
    KILL_SWITCH = "kill_switch", "Kill switch"
    BREAKER = "breaker", "Breaker override"
    RESET_DEFAULT = "reset_default", "Back to default"
    SEED = "seed", "Loaded defaults"


class ConfigChange(models.Model):
    """Who changed what, when, before and after, and why. Written by every operator change."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    # Kept as text so the record still names the operator after the account is gone.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=ChangeAction.choices)
    target_type = models.CharField(max_length=100, help_text="app_label.model")
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="config_change_target"),
            models.Index(fields=["action", "created_at"], name="config_change_action"),
        ]

    def __str__(self) -> str:
        when = self.created_at.strftime("%Y-%m-%d %H:%M:%S")
        return f"{when} {self.actor_name} {self.get_action_display().lower()} {self.target_repr}"


class Incident(models.Model):
    """A provider out of service: from its breaker opening to its closing again.

    Written off the request path from the breaker's events; the process whose transition won
    writes it, so each opening is one incident however many processes serve.
    """

    provider = models.CharField(max_length=64, db_index=True)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=100, blank=True)
    reopened = models.PositiveIntegerField(
        default=0, help_text="Failed half-open rounds before it recovered."
    )

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["provider", "ended_at"], name="incident_open")]

    def __str__(self) -> str:
        return f"{self.provider} out since {self.started_at:%Y-%m-%d %H:%M:%S}"

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()
