"""Why a provider on a request's walk was passed by without a call: an attempt's `error_class`
when its outcome is `skipped`, in the ledger, the status and the metrics. One list, made where
each decision is (the breaker, the health verdict, the budgets, the walk)."""

from __future__ import annotations

from enum import StrEnum


class SkipReason(StrEnum):
    UNSUPPORTED_KIND = "unsupported_kind"  # no adapter for its kind
    CANNOT_SERVE = "cannot_serve"  # the request asks what it can't do (detail: "parameter: why")
    API_KEY_MISSING = "api_key_missing"  # its key variable isn't set in this process
    HEALTH_DOWN = "health_down"  # the sentinel says down
    HEALTH_DEGRADED = "health_degraded"  # degraded, and the request is high priority
    DISABLED = "disabled"  # its breaker forced open by an operator
    BREAKER_OPEN = "breaker_open"
    PROBE_REJECTED = "probe_rejected"  # half-open, every probe slot taken
    BUDGET_EXHAUSTED = "budget_exhausted"
    BUDGET_HIGH_PRIORITY_ONLY = "budget_high_priority_only"  # past the budget's high-priority level
    IN_FLIGHT_LIMIT = "in_flight_limit"  # its calls in flight at the policy's most
    DEADLINE_EXCEEDED = "deadline_exceeded"  # too little of the request's time left
    CLOUD_NOT_ALLOWED = "cloud_not_allowed"  # a cloud the request may not use
    CONTEXT_TOO_SMALL = "context_too_small"  # the prompt won't fit its context window
