"""Alerts: the channels that wake a human, and every event with what became of it.

Models hold data and small properties; delivery writes through `alerts.delivery`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from alerts.channels import CHANNELS, KIND_CHOICES, Alert


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


# Ordered from least to most urgent: a channel takes events at or above its minimum.
SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


def severities_up_to(severity: str) -> list[str]:
    """The channel minimums that let an event of `severity` through."""
    ceiling = SEVERITY_RANK[Severity(severity)]
    return [str(level) for level, rank in SEVERITY_RANK.items() if rank <= ceiling]


class AlertChannel(models.Model):
    """Where alerts go: a Telegram chat, a Slack webhook, e-mail addresses or a webhook."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    config = models.JSONField(
        default=dict,
        blank=True,  # an empty config is reported by the kind's own checks, key by key
        help_text="JSON, by kind. "
        + " ".join(cls.config_help for cls in CHANNELS.values())
        + " Secrets stay in the environment: the config names their variables.",
    )
    min_severity = models.CharField(
        "minimum severity",
        max_length=16,
        choices=Severity.choices,
        default=Severity.WARNING,
        help_text="Events below this severity are not sent here.",
    )
    enabled = models.BooleanField(
        default=True,
        help_text="Switched off by itself when the channel answers with a permanent error "
        "(a revoked token, a chat that is gone); switch it back on once that is fixed.",
    )
    last_error = models.TextField(blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_sent_at = models.DateTimeField(null=True, blank=True, editable=False)
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    disabled_reason = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    def clean(self) -> None:
        cls = CHANNELS.get(self.kind)
        if cls is None:
            return  # the kind's own field reports an unknown choice
        try:
            self.config = cls.clean_config(self.config)
        except ValidationError as exc:
            raise ValidationError({"config": exc.messages}) from exc

    @property
    def secret_envs(self) -> list[str]:
        """The environment variables this channel's config names."""
        config: dict[str, Any] = self.config if isinstance(self.config, dict) else {}
        names = (config.get(key) for key in ("bot_token_env", "webhook_url_env", "secret_env"))
        return [name for name in names if isinstance(name, str) and name]


class EventKind(models.TextChoices):
    FAILOVER = "failover", "Failover"
    STATIC_TIER = "static_tier", "Static tier active"
    RECOVERY = "recovery", "Recovery"
    BUDGET = "budget", "Budget"
    CREDENTIALS = "credentials", "Credentials rejected"
    CLOUD_SHARE = "cloud_share", "Cloud share above target"
    SENTINEL_DOWN = "sentinel_down", "Sentinel down"
    LEDGER_REJECTED = "ledger_rejected", "Ledger records refused"
    HEALTH = "health", "Provider health (the sentinel's verdict)"
    ADMIN_LOGIN = "admin_login", "Admin log-ins refused"
    TEST = "test", "Test alert"


class EventStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    PARTLY_DELIVERED = "partly_delivered", "Partly delivered"
    FAILED = "failed", "Failed"
    SUPPRESSED = "suppressed", "Suppressed"
    NO_CHANNEL = "no_channel", "No channel"


class AlertEvent(models.Model):
    """One alert, kept whatever became of it: delivered, failed, or suppressed and why."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    key = models.CharField(
        max_length=200,
        help_text="Events with the same key are one alert for the cooldown, "
        "e.g. failover:ollama-local.",
    )
    title = models.CharField(max_length=200)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=20, choices=EventStatus.choices, default=EventStatus.PENDING
    )
    suppressed_reason = models.CharField(
        max_length=100, blank=True, help_text='Why it was not sent, e.g. "flap" or "cooldown".'
    )
    # [{"channel": "ops-telegram", "channel_id": 3, "kind": "telegram", "ok": false,
    #   "attempts": 3, "error": "Telegram answered 500: …", "at": "2025-…"}, ...]
    deliveries = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The cooldown's question: "the last event with this key, and when" (the index
            # also serves a lookup by key alone).
            models.Index(fields=["key", "created_at"], name="alertevent_key_created"),
            models.Index(fields=["status", "created_at"], name="alertevent_status_created"),
        ]

    def __str__(self) -> str:
        when = timezone.localtime(self.created_at).strftime("%Y-%m-%d %H:%M:%S")
        return f"{when} [{self.severity}] {self.title}"

    def as_alert(self) -> Alert:
        """The event as the channels send it: a plain value, no row."""
        return Alert(
            id=self.pk,
            created_at=self.created_at,
            kind=self.kind,
            severity=self.severity,
            key=self.key,
            title=self.title,
            message=self.message,
            data=self.data if isinstance(self.data, dict) else {},
        )
