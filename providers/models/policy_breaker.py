"""The policy's circuit-breaker fields: when a breaker opens (failures, slow calls, a sustained
p95, stuck calls), how long it stays open and how many probes close it. docs/architecture.md,
"The breaker"."""

from __future__ import annotations

from django.db import models

from providers.models.validators import at_least, percent


class BreakerPolicy(models.Model):
    """Part of `FailoverPolicy` (laid out by its FIELD_GROUPS), kept apart for its length."""

    consecutive_failures = models.PositiveSmallIntegerField(
        default=3, validators=at_least(1, "Consecutive failures")
    )
    failure_rate_pct = models.PositiveSmallIntegerField(
        "failure rate (%)", default=30, validators=percent("The failure rate")
    )
    failure_window_s = models.PositiveIntegerField(
        "failure window (s)", default=60, validators=at_least(1, "The failure window")
    )
    failure_min_calls = models.PositiveSmallIntegerField(
        "minimum calls in the window", default=5, validators=at_least(1, "The minimum calls")
    )
    slow_call_s = models.FloatField(
        "slow call (s)", default=8.0, validators=at_least(0.1, "The slow-call threshold")
    )
    slow_call_rate_pct = models.PositiveSmallIntegerField(
        "slow-call rate (%)", default=50, validators=percent("The slow-call rate")
    )
    p95_latency_s = models.FloatField(
        "p95 latency limit (s)", default=5.0, validators=at_least(0.1, "The p95 limit")
    )
    p95_window_s = models.PositiveIntegerField(
        "p95 window (s)", default=120, validators=at_least(1, "The p95 window")
    )
    # A call still waiting past this counts against the breaker at once (`routing/stuck.py`).
    stuck_multiplier = models.FloatField(
        "stuck after × the provider's p99",
        default=3.0,
        validators=at_least(1, "The stuck multiplier"),
        help_text="A call still waiting this many times the provider's recent p99 latency "
        "counts as a failure without waiting for its timeout.",
    )
    stuck_floor_s = models.FloatField(
        "stuck after at least (s)", default=1.0, validators=at_least(0.1, "The stuck floor")
    )
    stuck_cap_s = models.FloatField(
        "stuck after at most (s)",
        default=10.0,
        validators=at_least(0.1, "The stuck cap"),
        help_text="Also the threshold for a provider with no recent answers.",
    )
    # A provider without a latency history yet (fewer than 10 answers in this process), or a
    # half-open probe: the request goes on at this bound, the call runs on (`routing/hedge.py`).
    first_byte_bound_s = models.FloatField(
        "first byte within (s), without a history",
        default=1.5,
        validators=at_least(0.1, "The first-byte bound"),
        help_text="A call to a provider with no recent answers to judge by (after a restart), "
        "or a half-open probe, that has sent no first byte within this long: the request goes "
        "on to the next tier while the call runs on to its own timeout, which alone counts "
        "against the breaker.",
    )
    cooldown_s = models.PositiveIntegerField(
        "cooldown (s)", default=60, validators=at_least(1, "The cooldown")
    )
    cooldown_multiplier = models.FloatField(
        default=2.0, validators=at_least(1, "The cooldown multiplier")
    )
    max_cooldown_s = models.PositiveIntegerField(
        "maximum cooldown (s)", default=600, validators=at_least(1, "The maximum cooldown")
    )
    half_open_probes = models.PositiveSmallIntegerField(
        default=3, validators=at_least(1, "Half-open probes")
    )
    # An answer that ignores what its request required goes on to the next provider either way
    # (`routing/compliance.py`); whether it also counts against its provider is this.
    non_compliant_is_failure = models.BooleanField(
        "a non-compliant answer counts as a failure",
        default=False,
        help_text="An answer that ignores what the request required (the forced tool call, a "
        "tool it offered, JSON, the strict schema) is passed over for the next provider. On: "
        "it also counts against the provider's breaker. Off: a model that can't follow a "
        "request isn't taken for a provider that is down.",
    )

    class Meta:
        abstract = True
