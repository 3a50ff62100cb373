"""A streamed answer's end: its bookkeeping settled once the stream has ended, whole or broken
(the cascade hands the stream over at its first token, `RouteResult.stream`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers.adapters.errors import ProviderError
from providers.adapters.messages import estimate_tokens
from providers.routing.settling import settle

if TYPE_CHECKING:
    from providers.routing.cascade import RouteResult


async def finish_stream(
    result: RouteResult, error: ProviderError | None = None, *, client_gone: bool = False
) -> None:
    """Settle a streamed answer once it has ended: whole (no error), broken by its provider
    (`error`: a breaker failure, and the answer is a failed one in the ledger) or abandoned
    by the client (`client_gone`: nothing against the provider, nothing cached)."""
    pending, stream = result._pending, result.stream
    if pending is None or stream is None:
        return
    result._pending = None
    walk, ticket, attempt = pending.walk, pending.ticket, pending.attempt
    total_s = walk.ports.clock.mono() - ticket.started
    completion = stream.completion(
        total_s * 1000, estimate_tokens(walk.request.completion.all_text())
    )
    whole = error is None and not client_gone
    # The breaker judges a stream by its time to first token: a long answer isn't a slow call.
    first_token_s = attempt.latency_ms / 1000
    settled, cost = await settle(walk, ticket, completion, error, first_token_s, cache=whole)
    if whole and len(stream.parts) > 2:  # a stream of pauses: the next streams' stall limit
        walk.ports.stuck.note(ticket.provider.name, "gap", stream.longest_pause_s)
    attempt.outcome, attempt.error_class = settled.outcome, settled.error_class
    attempt.cost = settled.cost
    attempt.latency_ms, attempt.status, attempt.detail = (
        settled.latency_ms,
        settled.status,
        settled.detail,
    )
    result.text = completion.text
    result.tool_calls = completion.tool_calls
    result.reasoning = completion.reasoning
    result.tokens_in, result.tokens_out, result.cost = (
        completion.tokens_in,
        completion.tokens_out,
        cost,
    )
    result.tokens_estimated = completion.tokens_estimated
    result.finish_reason = finish_reason(stream.finish_reason)
    if not whole:
        result.interrupted = True
        result.reason = "client_disconnected" if client_gone else "stream_interrupted"
        if error is not None:
            attempt.detail = f"after the first token: {error.message}"[:200]


def finish_reason(reason: str) -> str:
    """An upstream's finish reason in OpenAI's words."""
    if reason in ("length", "max_tokens"):
        return "length"
    if reason in ("tool_calls", "tool_use"):
        return "tool_calls"
    return "stop"
