"""Money and the ledger: spending caps, and the audit log of every routed request."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone


class BudgetScope(models.TextChoices):
    ALL = "all", "All traffic"
    PROVIDER = "provider", "One provider"
    CLIENT = "client", "One client"


class BudgetPeriod(models.TextChoices):
    DAY = "day", "Day"
    MONTH = "month", "Month"


class BudgetUnit(models.TextChoices):
    MONEY = "money", "Money (the policy's currency)"
    TOKENS = "tokens", "Tokens (prompt and answer)"


def _percent(label: str) -> list:
    message = f"{label} must be between 1 and 100."
    return [MinValueValidator(1, message), MaxValueValidator(100, message)]


class Budget(models.Model):
    """A spending cap for a scope and period, with the thresholds that act on it."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices, default=BudgetScope.ALL)
    provider = models.ForeignKey(
        "providers.Provider",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="budgets",
        help_text="Only for a provider's budget.",
    )
    client_app = models.ForeignKey(
        "providers.ClientApp",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="budgets",
        verbose_name="client app",
        help_text="Only for a client's budget: the app whose requests it caps.",
    )
    period = models.CharField(
        max_length=8,
        choices=BudgetPeriod.choices,
        default=BudgetPeriod.DAY,
        help_text="Calendar days or months in the policy's time zone.",
    )
    unit = models.CharField(
        max_length=8,
        choices=BudgetUnit.choices,
        default=BudgetUnit.MONEY,
        help_text="What the cap counts: money at the providers' prices, or tokens.",
    )
    cap = models.DecimalField(
        max_digits=16,
        decimal_places=4,
        validators=[MinValueValidator(Decimal("0.0001"), "The cap must be above zero.")],
        help_text="In the policy's currency, or in tokens for a token budget.",
    )
    warn_pct = models.PositiveSmallIntegerField(
        "warn at (%)", default=50, validators=_percent("The warning level")
    )
    high_priority_only_pct = models.PositiveSmallIntegerField(
        "high priority only from (%)",
        default=85,
        validators=_percent("The high-priority-only level"),
    )
    hard_stop_pct = models.PositiveSmallIntegerField(
        "hard stop at (%)", default=100, validators=_percent("The hard stop")
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "period", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["period", "unit"],
                condition=Q(scope="all"),
                name="budget_one_all_per_period",
                violation_error_message="There is already a budget for all traffic and period.",
            ),
            models.UniqueConstraint(
                fields=["provider", "period", "unit"],
                condition=Q(scope="provider"),
                name="budget_one_per_provider_period",
                violation_error_message="This provider already has a budget for this period.",
            ),
            models.UniqueConstraint(
                fields=["client_app", "period", "unit"],
                condition=Q(scope="client"),
                name="budget_one_per_client_period",
                violation_error_message="This client already has a budget for this period.",
            ),
        ]

    def __str__(self) -> str:
        if self.scope == BudgetScope.PROVIDER and self.provider is not None:
            target = f"provider {self.provider.name}"
        elif self.scope == BudgetScope.CLIENT and self.client_app is not None:
            target = f"client {self.client_app.name}"
        else:
            target = "all traffic"
        if self.unit == BudgetUnit.TOKENS:
            return f"{target}: {self.cap:,.0f} tokens per {self.period}"
        return f"{target}: {self.cap:,.2f} per {self.period}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.scope == BudgetScope.PROVIDER and self.provider_id is None:
            errors["provider"] = "A provider's budget needs its provider."
        if self.scope != BudgetScope.PROVIDER and self.provider_id is not None:
            errors["provider"] = "Only a provider's budget names a provider."
        if self.scope == BudgetScope.CLIENT and self.client_app_id is None:
            errors["client_app"] = "A client's budget needs its client app."
        if self.scope != BudgetScope.CLIENT and self.client_app_id is not None:
            errors["client_app"] = "Only a client's budget names a client app."
        levels = (self.warn_pct, self.high_priority_only_pct, self.hard_stop_pct)
        if None not in levels and not levels[0] <= levels[1] <= levels[2]:
            errors["high_priority_only_pct"] = (
                "The levels must rise: warn ≤ high priority only ≤ hard stop."
            )
        if errors:
            raise ValidationError(errors)


class Tier(models.TextChoices):
    PRIMARY = "primary", "Primary provider"
    SECONDARY = "secondary", "Secondary provider"
    CACHE = "cache", "Cached answer"
    STATIC = "static", "Static answer"
    DEGRADED = "degraded", "Degradation message"
    NONE = "none", "No answer"


class Outcome(models.TextChoices):
    OK = "ok", "Answered by a provider"
    FALLBACK = "fallback", "Answered by a fallback tier"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected (client error)"


class Priority(models.TextChoices):
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"


class CallRecord(models.Model):
    """One routed request: who asked, who was tried, who answered, at what cost.

    The provider is kept by name, not by key, so the ledger never changes when the registry does.
    """

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    client = models.CharField(max_length=100, blank=True)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    task = models.CharField(max_length=100, blank=True)
    # [{"provider": "ollama-local", "model": "llama3.2", "outcome": "error",
    #   "error_class": "timeout", "latency_ms": 8001, "status": null, "cost": "0"}, ...]
    # in the order tried.
    attempts = models.JSONField(default=list, blank=True)
    final_provider = models.CharField(max_length=64, blank=True)
    tier = models.CharField(max_length=16, choices=Tier.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.CharField(
        max_length=64, blank=True, help_text="Why this tier served, e.g. primary_breaker_open."
    )
    status = models.PositiveSmallIntegerField(help_text="HTTP status returned to the client.")
    latency_ms = models.PositiveIntegerField(default=0)
    model = models.CharField(
        max_length=100, blank=True, help_text="The model of the provider that answered."
    )
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    tokens_estimated = models.BooleanField(
        default=False,
        help_text="The token counts (and so the cost) are the gateway's estimate: the "
        "provider's stream reported no usage.",
    )
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal("0"))
    cache_hit = models.BooleanField(default=False)
    static_answer = models.ForeignKey(
        "providers.StaticAnswer",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    prompt_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the prompt.")
    prompt = models.TextField(blank=True, help_text="Kept only when the policy stores prompts.")

    class Meta:
        ordering = ["-created_at"]
        # One index per admin filter, each led by its filter and ending in time: the ledger is
        # read as "this provider / tier / outcome, recently".
        indexes = [
            models.Index(fields=["created_at"], name="callrecord_created"),
            models.Index(fields=["final_provider", "created_at"], name="callrecord_provider"),
            models.Index(fields=["tier", "created_at"], name="callrecord_tier"),
            models.Index(fields=["outcome", "created_at"], name="callrecord_outcome"),
            models.Index(fields=["client", "created_at"], name="callrecord_client"),
        ]

    def __str__(self) -> str:
        served_by = self.final_provider or self.get_tier_display().lower()
        return f"{self.request_id} → {served_by} ({self.status})"


class DailyUsage(models.Model):
    """One day of the ledger summed per provider, client, tier, outcome and cloud or not: what
    the reports read for the days rolled up (`billing.retention`), kept after the rows are
    pruned.

    The day is the policy's time zone's when it was rolled up; `provider` is blank for the
    fallback tiers; `is_cloud` says the provider was not self-hosted at roll-up time.
    """

    day = models.DateField()
    provider = models.CharField(max_length=64, blank=True)
    client = models.CharField(max_length=100, blank=True)
    tier = models.CharField(max_length=16, choices=Tier.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    is_cloud = models.BooleanField()
    requests = models.PositiveBigIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=8, default=Decimal("0"))
    cache_hits = models.PositiveBigIntegerField(default=0)
    static_answers = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "provider", "client", "tier", "outcome"]
        verbose_name_plural = "daily usage"
        constraints = [
            # Led by the day: the index the reports' day ranges read.
            models.UniqueConstraint(
                fields=["day", "provider", "client", "tier", "outcome", "is_cloud"],
                name="daily_usage_one_row_per_dimensions",
            )
        ]

    def __str__(self) -> str:
        served_by = self.provider or self.get_tier_display().lower()
        return f"{self.day}: {self.requests} requests of {self.client or 'anonymous'} → {served_by}"


class IncidentUsage(models.Model):
    """The requests each tier served while an incident lasted, and their cloud cost: rolled up
    with the days, since a day's sums can't say what fell inside an outage."""

    incident = models.ForeignKey("providers.Incident", on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=16, choices=Tier.choices)
    requests = models.PositiveBigIntegerField(default=0)
    cloud_cost = models.DecimalField(max_digits=18, decimal_places=8, default=Decimal("0"))

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["incident", "tier"], name="incident_usage_one_row_per_tier"
            )
        ]

    def __str__(self) -> str:
        return f"incident {self.incident_id}: {self.requests} requests on {self.tier}"


class LedgerRollUp(models.Model):
    """How far the ledger is rolled up, one row: every record created before `through_at` with
    an id up to `through_id` is in the roll-ups. Ids only grow, so rows written later for an
    earlier day (a replayed spill file) are the ones above `through_id`."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    through_at = models.DateTimeField(null=True, blank=True)
    through_id = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"ledger rolled up through {self.through_at} (record {self.through_id})"
