"""An attempt in a span of its own, when the process exports traces (`gateway/engine/tracing.py`):
started as the call starts, its trace context sent upstream with the call, ended as the call
hands its answer over (a stream's at its first token) with what became of it. A call that runs
on past the first-byte bound (`routing/hedge.py`) runs in a task of its own, this span with it,
and ends when it does."""

from __future__ import annotations

from collections.abc import Awaitable

from gateway.engine import tracing
from gateway.routing.walk import AttemptOutcome, AttemptResult, Ticket


async def traced(
    trace: tracing.RequestTrace, ticket: Ticket, call: Awaitable[AttemptResult]
) -> AttemptResult:
    provider = ticket.provider
    span = trace.attempt(
        provider=provider.name,
        kind=provider.kind,
        model=ticket.request.model or provider.model,
        base_url=provider.base_url,
        breaker=str(ticket.state.state),
        probe=ticket.was_probe,
    )
    token = tracing.ATTEMPT.set(span)
    try:
        result = await call
    except BaseException:  # cancelled: the request's client gone, or the call given up
        span.finished(
            outcome=AttemptOutcome.CANCELLED, error_class="", status=None, latency_ms=0,
            tokens_in=0, tokens_out=0, finish_reason="", cost="",
        )  # fmt: skip
        raise
    finally:
        tracing.ATTEMPT.reset(token)
    made, completion = result.attempt, result.completion
    span.finished(
        outcome=made.outcome,
        error_class=made.error_class,
        status=made.status,
        latency_ms=made.latency_ms,
        tokens_in=completion.tokens_in if completion is not None else 0,
        tokens_out=completion.tokens_out if completion is not None else 0,
        finish_reason=completion.finish_reason if completion is not None else "",
        cost="" if made.cost is None else str(made.cost),
        dropped=made.dropped,
    )
    return result
