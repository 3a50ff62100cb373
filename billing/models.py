"""Money and the ledger: spending caps, and the audit log of every routed request."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
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
    client = models.CharField(
        max_length=100,
        blank=True,
        help_text="Only for a client's budget: the client app's name (as the ledger names it).",
    )
    period = models.CharField(max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.DAY)
    cap = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        validators=[MinValueValidator(Decimal("0.0001"), "The cap must be above zero.")],
    )
    currency = models.CharField(
        max_length=3,
        default="USD",
        validators=[RegexValidator(r"^[A-Z]{3}$", "Use a three-letter currency code, e.g. USD.")],
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
                fields=["period"],
                condition=Q(scope="all"),
                name="budget_one_all_per_period",
                violation_error_message="There is already a budget for all traffic and period.",
            ),
            models.UniqueConstraint(
                fields=["provider", "period"],
                condition=Q(scope="provider"),
                name="budget_one_per_provider_period",
                violation_error_message="This provider already has a budget for this period.",
            ),
            models.UniqueConstraint(
                fields=["client", "period"],
                condition=Q(scope="client"),
                name="budget_one_per_client_period",
                violation_error_message="This client already has a budget for this period.",
            ),
        ]

    def __str__(self) -> str:
        if self.scope == BudgetScope.PROVIDER and self.provider is not None:
            target = f"provider {self.provider.name}"
        elif self.scope == BudgetScope.CLIENT:
            target = f"client {self.client}"
        else:
            target = "all traffic"
        return f"{target}: {self.cap:,.2f} {self.currency} per {self.period}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.scope == BudgetScope.PROVIDER and self.provider_id is None:
            errors["provider"] = "A provider's budget needs its provider."
        if self.scope != BudgetScope.PROVIDER and self.provider_id is not None:
            errors["provider"] = "Only a provider's budget names a provider."
        if self.scope == BudgetScope.CLIENT and not self.client.strip():
            errors["client"] = "A client's budget needs the client app's name."
        if self.scope != BudgetScope.CLIENT and self.client:
            errors["client"] = "Only a client's budget names a client."
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
    # [{"provider": "ollama-local", "outcome": "error", "error_class": "timeout",
    #   "latency_ms": 8001, "status": null}, ...] in the order tried.
    attempts = models.JSONField(default=list, blank=True)
    final_provider = models.CharField(max_length=64, blank=True)
    tier = models.CharField(max_length=16, choices=Tier.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.CharField(
        max_length=64, blank=True, help_text="Why this tier served, e.g. primary_breaker_open."
    )
    status = models.PositiveSmallIntegerField(help_text="HTTP status returned to the client.")
    latency_ms = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
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
