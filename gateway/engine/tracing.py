"""Where a request's trace reaches into the library: the trace of the request being routed and
of the attempt being made, as context variables a serving process sets when it exports traces
(`runtime/tracing.py`), and nothing at all when it doesn't.

The library never imports a tracing SDK: it asks the request's trace for an attempt's span as
it calls a provider (`gateway/routing/attempts.py`) and the attempt's span for the headers that
carry the trace upstream (`gateway/adapters/base.py`, W3C `traceparent`). With tracing off both
variables stay None and each of those places costs one lookup.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol


class AttemptTrace(Protocol):
    def upstream_headers(self) -> tuple[tuple[str, str], ...]:
        """The headers that carry this attempt's trace context to the provider: W3C
        `traceparent`, and `tracestate` when the process carries a caller's on."""
        ...

    def finished(
        self,
        *,
        outcome: str,
        error_class: str,
        status: int | None,
        latency_ms: int,
        tokens_in: int,
        tokens_out: int,
        finish_reason: str,
        cost: str,
        dropped: tuple[str, ...] = (),
    ) -> None:
        """The attempt as it ended (its span ends with it); `dropped`: the request's fields
        its call left out."""
        ...


class RequestTrace(Protocol):
    def attempt(
        self, *, provider: str, kind: str, model: str, base_url: str, breaker: str, probe: bool
    ) -> AttemptTrace:
        """A child span for one call to a provider, started now."""
        ...


# The request being routed in this context, and the attempt whose call is on its way.
REQUEST: ContextVar[RequestTrace | None] = ContextVar("failover_request_trace", default=None)
ATTEMPT: ContextVar[AttemptTrace | None] = ContextVar("failover_attempt_trace", default=None)


def upstream_headers() -> tuple[tuple[str, str], ...]:
    """The headers a provider call adds for its trace: none unless a trace is exported."""
    attempt = ATTEMPT.get()
    return () if attempt is None else attempt.upstream_headers()
