"""What one routed request came to: the answer and who gave it (`RouteResult`, frozen), or why
there was none (`RouteError`, in the gateway's words). A streamed answer's result is made at its
first token and made again, finished, by `cascade.finish_stream`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gateway.adapters.messages import ToolCall
from gateway.adapters.stream import CompletionStream
from gateway.engine.breaker import BreakerEvent
from gateway.routing.streams import PendingStream
from gateway.routing.walk import Attempt, Tier


@dataclass(frozen=True, slots=True)
class RouteError:
    """Why a routed request got no answer, in the gateway's words: `code` and `message` for
    every caller, `param` the request's parameter at fault, `provider` the one that refused."""

    code: str
    message: str
    param: str = ""
    provider: str = ""
    # A request over every context window: (its prompt's tokens, the answer's asked for, the
    # largest window), as estimated.
    context: tuple[int, int, int] | None = None

    def as_body(self) -> dict[str, str]:
        """The error object of the gateway's own endpoints: what is set, nothing empty."""
        body = {"code": self.code, "message": self.message}
        if self.param:
            body["param"] = self.param
        if self.provider:
            body["provider"] = self.provider
        return body


@dataclass(frozen=True, slots=True)
class RouteResult:
    text: str
    tier: Tier
    status: int = 200
    provider: str = ""
    is_fallback: bool = False
    degradation_notice: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal("0")
    reason: str = ""
    static_answer_id: int | None = None
    cache_hit: bool = False
    cached_age_s: int | None = None
    finish_reason: str = "stop"
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    reasoning_signature: str = ""  # who wrote the thinking (`messages.Thought.signed`)
    tokens_estimated: bool = False  # a stream whose upstream sent no usage: counted by estimate
    embeddings: tuple[tuple[float, ...], ...] = ()  # an embedding request's vectors
    error: RouteError | None = None
    retry_after_s: int | None = None  # a 503's: when a retry may find a provider to ask
    store_prompt: bool = False  # the policy keeps prompts in the ledger
    # A streamed answer whose first token has arrived: the rest is read by the view, then
    # `finish_stream` settles it and gives the finished result (`interrupted`: it broke before
    # its end).
    stream: CompletionStream | None = None
    interrupted: bool = False
    attempts: list[Attempt] = field(default_factory=list)
    events: list[BreakerEvent] = field(default_factory=list)
    pending: PendingStream | None = None  # the stream's settling, until `finish_stream`

    @property
    def dropped(self) -> tuple[str, ...]:
        """The request's fields the answering provider's call left out."""
        for attempt in reversed(self.attempts):
            if attempt.provider == self.provider and attempt.outcome == "ok":
                return attempt.dropped
        return ()

    @property
    def outcome(self) -> str:
        if self.error is not None or self.interrupted:
            return "rejected" if self.status < 500 and not self.interrupted else "failed"
        return "fallback" if self.is_fallback else "ok"
