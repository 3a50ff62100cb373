"""A streamed answer's end: its bookkeeping settled once the stream has ended, whole or broken.

The cascade hands the stream over at its first token with a `PendingStream` (on
`RouteResult.pending`); the view reads the rest, then the pending stream's `finish` settles
the call and says what the answer came to (`StreamEnd`)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import ToolCall, estimate_tokens
from gateway.adapters.stream import CompletionStream
from gateway.routing.settling import settle
from gateway.routing.walk import Attempt, Ticket, Walk


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """What a finished stream came to, for its route result and its ledger row."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    reasoning: str
    reasoning_signature: str
    tokens_in: int
    tokens_out: int
    cost: Decimal
    tokens_estimated: bool
    finish_reason: str
    # Broken before its end: "stream_interrupted" (by its provider) or "client_disconnected".
    interrupted_by: str = ""


@dataclass(slots=True)
class PendingStream:
    """A streamed answer past its first token, not yet settled: its walk, its provider's
    ticket and the attempt the ledger will show."""

    walk: Walk
    ticket: Ticket
    attempt: Attempt
    stream: CompletionStream
    finished: bool = False

    async def finish(
        self, error: ProviderError | None = None, *, client_gone: bool = False
    ) -> StreamEnd | None:
        """Settle the stream once it has ended: whole (no error), broken by its provider
        (`error`: a breaker failure, and the answer is a failed one in the ledger) or abandoned
        by the client (`client_gone`: nothing against the provider, nothing cached). None when
        it was settled already."""
        if self.finished:
            return None
        self.finished = True
        walk, ticket, attempt, stream = self.walk, self.ticket, self.attempt, self.stream
        total_s = walk.ports.clock.mono() - ticket.started
        completion = stream.completion(
            total_s * 1000, estimate_tokens(walk.request.completion.all_text())
        )
        whole = error is None and not client_gone
        # The breaker judges a stream by its time to first token: a long answer isn't a slow
        # call.
        first_token_s = attempt.latency_ms / 1000
        settled, cost = await settle(walk, ticket, completion, error, first_token_s, cache=whole)
        if whole and len(stream.parts) > 2:  # a stream of pauses: the next streams' stall limit
            walk.ports.stuck.note(ticket.provider.name, "gap", stream.longest_pause_s)
        attempt.outcome, attempt.error_class = settled.outcome, settled.error_class
        attempt.cost = settled.cost
        attempt.latency_ms, attempt.status = settled.latency_ms, settled.status
        attempt.detail = settled.detail
        if error is not None:
            attempt.detail = f"after the first token: {error.message}"[:200]
        return StreamEnd(
            text=completion.text,
            tool_calls=completion.tool_calls,
            reasoning=completion.reasoning,
            reasoning_signature=completion.reasoning_signature,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            cost=cost,
            tokens_estimated=completion.tokens_estimated,
            finish_reason=finish_reason(stream.finish_reason),
            interrupted_by=(
                "" if whole else "client_disconnected" if client_gone else "stream_interrupted"
            ),
        )


def finish_reason(reason: str) -> str:
    """An upstream's finish reason in OpenAI's words."""
    if reason in ("length", "max_tokens"):
        return "length"
    if reason in ("tool_calls", "tool_use"):
        return "tool_calls"
    return "stop"
