"""The error table: every way an upstream call can fail, and what the router does about it.

One table, the router's single source of truth (docs/architecture.md, "The error table").
Adapters classify an upstream failure into an `ErrorClass`; the router looks the class up here
and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from enum import StrEnum


class ErrorClass(StrEnum):
    REFUSED = "refused"  # connection refused, DNS, TLS, connection reset before an answer
    TIMEOUT = "timeout"  # connect, read or the request's deadline
    SERVER_ERROR = "server_error"  # HTTP 5xx
    MALFORMED = "malformed"  # a 2xx whose body isn't the answer the API promises
    RATE_LIMITED = "rate_limited"  # HTTP 429 (Anthropic's 529 overloaded, Ollama's 503 busy)
    AUTH = "auth"  # HTTP 401/403: our credentials, not the client's fault
    CONTEXT_TOO_LONG = "context_too_long"  # HTTP 400 saying the input exceeds the context
    CLIENT_ERROR = "client_error"  # other HTTP 400/422: the request itself is at fault
    UPSTREAM_REJECTED = "upstream_rejected"  # other 4xx (404 model missing, 405 …): our config
    UNSUPPORTED = "unsupported"  # HTTP 400: the model can't do what was asked (Ollama's tools)
    # A 2xx answer that ignores what the request required: the forced tool call, the offered
    # tools, JSON, the strict schema (`routing/compliance.py`).
    NON_COMPLIANT = "non_compliant"
    # A 2xx answer that quotes a secret the gateway holds (a key, a token), whole or in a
    # stream's pieces (`engine/secret_watch.py`): never served, never cached.
    SECRET_IN_ANSWER = "secret_in_answer"


@dataclass(frozen=True, slots=True)
class ErrorRule:
    try_next: bool  # go on to the next provider
    breaker_failure: bool  # counts as a failure on this provider's breaker
    slow_call: bool = False  # also counts as a slow call
    opens_breaker: bool = False  # opens the breaker at once
    cool_down: bool = False  # provider skipped for Retry-After (or the base cooldown)
    larger_context_only: bool = False  # go on only to providers with a larger context window
    alert: str = ""  # the alert an attempt that failed so raises (read by the runtime's outcomes)


ERROR_TABLE: dict[ErrorClass, ErrorRule] = {
    ErrorClass.REFUSED: ErrorRule(try_next=True, breaker_failure=True),
    ErrorClass.TIMEOUT: ErrorRule(try_next=True, breaker_failure=True, slow_call=True),
    ErrorClass.SERVER_ERROR: ErrorRule(try_next=True, breaker_failure=True),
    ErrorClass.MALFORMED: ErrorRule(try_next=True, breaker_failure=True),
    ErrorClass.RATE_LIMITED: ErrorRule(try_next=True, breaker_failure=False, cool_down=True),
    ErrorClass.AUTH: ErrorRule(
        try_next=True, breaker_failure=True, opens_breaker=True, alert="credentials"
    ),
    ErrorClass.CONTEXT_TOO_LONG: ErrorRule(
        try_next=True, breaker_failure=False, larger_context_only=True
    ),
    ErrorClass.CLIENT_ERROR: ErrorRule(try_next=False, breaker_failure=False),
    ErrorClass.UPSTREAM_REJECTED: ErrorRule(try_next=True, breaker_failure=True),
    # The provider is fine; this request asks its model for what it lacks: skip it this once.
    ErrorClass.UNSUPPORTED: ErrorRule(try_next=True, breaker_failure=False),
    # A failure on the breaker only if the policy says so (`non_compliant_is_failure`).
    ErrorClass.NON_COMPLIANT: ErrorRule(try_next=True, breaker_failure=False),
    # Counted against the provider as a garbage answer is: something upstream hands it keys.
    ErrorClass.SECRET_IN_ANSWER: ErrorRule(try_next=True, breaker_failure=True),
}


class ProviderError(Exception):
    """An upstream call that produced no usable answer, classified for the router."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s

    @property
    def rule(self) -> ErrorRule:
        return ERROR_TABLE[self.error_class]


# A Retry-After further out than this is treated as this: an hour is already "go elsewhere".
MAX_RETRY_AFTER_S = 3600.0


def parse_retry_after(value: str | None, *, now_epoch: float) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            # asctime dates (and "-0000") carry no zone; an HTTP-date is always GMT (RFC 9110).
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now_epoch
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def classify_status(status: int, message: str) -> ErrorClass:
    """The error class of an HTTP error status, with the body's message for 400s."""
    if status in (401, 403):
        return ErrorClass.AUTH
    if status in (429, 529):  # 529: Anthropic's "overloaded", a cool-down rather than a fault
        return ErrorClass.RATE_LIMITED
    if status >= 500:
        return ErrorClass.SERVER_ERROR
    if status in (400, 413, 422) and _mentions_context_length(message):
        return ErrorClass.CONTEXT_TOO_LONG
    if status in (400, 422):
        return ErrorClass.CLIENT_ERROR
    return ErrorClass.UPSTREAM_REJECTED


_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
)


def _mentions_context_length(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _CONTEXT_MARKERS)


# Ollama's 503 when its queue is full (OLLAMA_MAX_QUEUE): "server busy, please try again.
# maximum pending requests exceeded". A moment's overload, not a fault: it cools down.
_OLLAMA_BUSY = "server busy"
# Ollama's 400 for a capability the model lacks: "registry.ollama.ai/library/llama3:latest does
# not support tools", '"llama3" does not support thinking', "… does not support generate".
_OLLAMA_UNSUPPORTED = re.compile(
    r"does not support (tools|thinking|chat|generate|completion|insert|embeddings)\b"
)


def classify_ollama(status: int, message: str) -> ErrorClass:
    """`classify_status` with Ollama's own words: a busy server cools down, and a model
    without the capability asked for is skipped for the request, not the provider's fault."""
    if status == 503 and _OLLAMA_BUSY in message.lower():
        return ErrorClass.RATE_LIMITED
    if status == 400 and _OLLAMA_UNSUPPORTED.search(message.lower()):
        return ErrorClass.UNSUPPORTED
    return classify_status(status, message)
