"""What happened: every operator change, and every provider outage as an incident."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


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


class IncidentClosedReason(models.TextChoices):
    # Left open by a process that stopped, with no breaker anywhere still open to end it: we
    # don't know it recovered, only that nothing follows it any more.
    RESTART = "restart", "Closed at a restart"
    # An operator reset the breaker (or forced it): the outage ends by their word, not a probe's.
    OPERATOR = "operator", "Closed by an operator"


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
    closed_reason = models.CharField(
        max_length=16,
        choices=IncidentClosedReason.choices,
        blank=True,
        help_text="Why it was closed, when not by its breaker closing.",
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
