"""Validators the control plane's models share (and the alert channels' URLs)."""

from __future__ import annotations

import re
import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)

# An http(s) URL the outbound URL policy allows: kept here beside the other shared validators.
from providers.models.outbound import http_url_validator as http_url_validator

env_var_name_validator = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$",
    "Enter the name of an environment variable (capitals, digits and underscores, "
    "e.g. OPENAI_API_KEY), not the key itself.",
    code="invalid_env_var_name",
)


# What a task name may be, here and in a request's "task" field.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def percent(field_label: str) -> list:
    return [
        MinValueValidator(0, f"{field_label} must be between 0 and 100."),
        MaxValueValidator(100, f"{field_label} must be between 0 and 100."),
    ]


def at_least(minimum: float, field_label: str) -> list:
    return [MinValueValidator(minimum, f"{field_label} must be at least {minimum}.")]


def time_zone_validator(value: str) -> None:
    """An IANA time zone name this machine knows (e.g. Europe/Amsterdam, UTC)."""
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"{value!r} is not a time zone this server knows; use an IANA name such as "
            "Europe/Amsterdam or UTC.",
            code="invalid_time_zone",
        ) from None


currency_validator = RegexValidator(
    r"^[A-Z]{3}$", "Use a three-letter currency code, e.g. EUR.", code="invalid_currency"
)
