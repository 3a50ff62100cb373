"""The policy's money and reports fields: the currency and time zone budgets count in, the
targets the reports hold traffic to, and how long the ledger keeps its rows."""

from __future__ import annotations

from django.db import models

from providers.models.validators import at_least, currency_validator, percent, time_zone_validator


class MoneyPolicy(models.Model):
    """Part of `FailoverPolicy` (laid out by its FIELD_GROUPS), kept apart for its length."""

    currency = models.CharField(
        max_length=3,
        default="EUR",
        validators=[currency_validator],
        help_text="Providers' prices and money budgets are in this currency.",
    )
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        validators=[time_zone_validator],
        help_text="Budget days and months, and the reports' days, begin at midnight here "
        "(an IANA name, e.g. Europe/Amsterdam).",
    )
    cloud_share_target_pct = models.FloatField(
        "cloud share target (%)",
        default=5.0,
        validators=percent("The cloud share target"),
        help_text="At most this share of answered requests should reach a cloud provider.",
    )
    static_coverage_target_pct = models.FloatField(
        "static coverage target (%)",
        default=60.0,
        validators=percent("The static coverage target"),
        help_text="The share of questions the static answers should be able to answer.",
    )
    ledger_retention_days = models.PositiveIntegerField(
        "ledger retention (days)",
        default=30,
        validators=at_least(1, "The ledger retention"),
        help_text="Call records older than this are deleted once the daily reports hold them.",
    )

    class Meta:
        abstract = True
