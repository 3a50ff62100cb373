"""A streamed answer, handed to the router once its first text is in. The stream reads lines
and keeps the answer so far; its dialect's `StreamDecoder` reads each event into a piece, and
its provider's `Failures` make every error it raises: the stream knows no adapter. A provider
with secrets has each piece watched for them first (`engine/secret_watch.py`): what could begin
one is held back until the next piece, and a secret fails the stream (`secret_in_answer`)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

import httpx

from gateway.adapters.errors import ErrorClass
from gateway.adapters.failures import SECRET_QUOTED, Failures
from gateway.adapters.messages import (
    Completion,
    Piece,
    Reasoning,
    ToolCall,
    ToolCallDelta,
    estimate_tokens,
)
from gateway.engine import codec
from gateway.engine.secret_watch import TEXT, THINKING, Kind, StreamWatch


class StreamDecoder(Protocol):
    """One streamed answer's dialect: how it is framed (server-sent events, or one JSON object a
    line) and each decoded event read into a piece. A decoder is made for one stream and keeps
    what its dialect needs to follow it (Anthropic's blocks, the forced tool's name)."""

    framing: str  # "sse" or "ndjson"

    def decode(self, event: Any, stream: CompletionStream) -> Piece:
        """Its text ("" if none) or a piece of a tool call; notes usage, the finish reason and
        the end on `stream` (more pieces of one event in `stream.queued`); raises ProviderError
        for an error event."""
        ...


class CompletionStream:
    """An answer arriving piece by piece, handed over once its first piece is in (`first`):
    text, or the start of a tool call.

    `rest()` yields the remaining pieces; a stream that breaks raises ProviderError from it.
    The decoder fills in the usage and finish reason as events arrive.
    """

    def __init__(
        self,
        provider: str,
        decoder: StreamDecoder,
        failures: Failures,
        response: httpx.Response,
        idle_s: float,
        started: float,
    ) -> None:
        self.provider = provider
        self.decoder = decoder
        self.failures = failures
        self.first: Piece = ""
        self.parts: list[str] = []
        self.reasoning: list[str] = []  # the model's thinking, piece by piece
        self.before: list[Reasoning] = []  # thinking that came before the first piece
        self.reasoning_signature = ""  # who wrote the thinking (`messages.Thought.signed`)
        self.calls: dict[int, list[str]] = {}  # index → [id, name, arguments so far]
        # More pieces of the event just read (a chunk with several tool calls), given next.
        self.queued: deque[Piece] = deque()
        self.tokens_in = 0
        self.tokens_out = 0
        self.finish_reason = ""
        self.done = False
        self.started = started
        self.first_token_s = 0.0  # how long the first text took
        self._response = response
        self._lines = response.aiter_lines()
        self._idle_s = idle_s
        self._closed = False
        self.longest_pause_s = 0.0  # between two pieces after the first (the stall rule's measure)
        self._stall_s = 0.0
        self._on_stall: Callable[[float], None] | None = None
        # Each piece noted as it comes or, where the provider has secrets, watched first.
        watch = failures.watch
        self._watch = None if watch is None else StreamWatch(watch)
        self._take = self._taken if watch is None else self._watched
        self._kind: Kind = TEXT  # of the last piece watched

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(*self.calls[index]) for index in sorted(self.calls))

    async def next_text(self, deadline: float, timeout_message: str) -> Piece | None:
        """The next non-empty piece, or None once the stream has ended properly."""
        decoder, failures = self.decoder, self.failures
        sse = decoder.framing == "sse"
        while self.queued or not self.done:
            if self.queued:
                piece = self._take(self.queued.popleft())
                if piece:
                    return piece
                continue
            with failures.classified(timeout_message):
                async with asyncio.timeout_at(deadline):
                    try:
                        line = await anext(self._lines)
                    except StopAsyncIteration:
                        line = None
            if line is None:
                if self.finish_reason:  # ended without its end marker, but after the finish
                    self.done = True
                    break
                raise failures.failed(ErrorClass.REFUSED, "the stream ended before its end")
            if sse:
                if not line.startswith("data:"):
                    continue  # event names, comments, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    self.done = True
                    continue
            else:
                data = line.strip()
                if not data:
                    continue
            try:
                event = codec.loads(data)
            except (ValueError, RecursionError):
                raise failures.malformed("a stream event is not JSON") from None
            piece = self._take(decoder.decode(event, self))
            if piece:
                return piece
        watch = self._watch
        if watch is None:
            return None
        # Ended: what the watch held back holds no secret and goes last, as it is.
        self._watch, self._take = None, self._taken
        held = watch.held_back(self._kind)
        if held:
            self.queued.append(_piece_of(self._kind, held))
        return await self.next_text(deadline, timeout_message)

    def _taken(self, piece: Piece) -> Piece:
        """A piece noted in the answer so far (its text, or its tool call's)."""
        if isinstance(piece, ToolCallDelta):
            call = self.calls.get(piece.index)
            if call is not None and (piece.id or piece.name):
                # an upstream that names the call on every piece: named once, as OpenAI does
                piece = ToolCallDelta(piece.index, arguments=piece.arguments)
            if call is None:
                call = self.calls[piece.index] = [piece.id, piece.name, ""]
            call[2] += piece.arguments
        elif isinstance(piece, Reasoning):
            if not piece.text:
                return ""
            self.reasoning.append(piece.text)
        elif piece:
            self.parts.append(piece)
        return piece

    def _watched(self, piece: Piece) -> Piece:
        """`_taken` for what of `piece` may go on yet (a secret's possible beginning held
        back); a secret in it fails the stream."""
        kind: Kind
        if isinstance(piece, str):
            kind, text = TEXT, piece
        elif isinstance(piece, ToolCallDelta):
            kind, text = piece.index, piece.arguments
        else:
            kind, text = THINKING, piece.text
        watch = self._watch
        assert watch is not None
        if kind != self._kind:
            if not text and not isinstance(piece, ToolCallDelta):
                return ""  # an event without text: nothing to watch, nothing to order
            held = watch.held_back(self._kind)
            before, self._kind = self._kind, kind
            if held:  # what the other kind held back goes first, this piece next
                self.queued.appendleft(piece)
                return self._taken(_piece_of(before, held))
        if not text:
            return self._taken(piece)
        passed = watch.passed(kind, text)
        if passed is None:
            raise self.failures.failed(ErrorClass.SECRET_IN_ANSWER, SECRET_QUOTED)
        if kind == TEXT:  # the usual piece, noted here (`_taken` would ask what it is again)
            if passed:
                self.parts.append(passed)
            return passed
        if passed is not text:
            if isinstance(piece, ToolCallDelta):
                if not (passed or piece.id or piece.name):
                    return ""
                piece = ToolCallDelta(piece.index, piece.id, piece.name, passed)
            else:
                piece = _piece_of(kind, passed)
        return self._taken(piece)

    def watch_pauses(self, stall_s: float, on_stall: Callable[[float], None]) -> None:
        """A pause between two pieces longer than `stall_s` is told to `on_stall` (once per
        stream) while it lasts; the stream goes on waiting, up to its own pause limit."""
        if stall_s < self._idle_s:
            self._stall_s, self._on_stall = stall_s, on_stall

    def _stalled(self) -> None:
        on_stall, self._on_stall = self._on_stall, None
        if on_stall is not None:
            on_stall(self._stall_s)

    async def rest(self) -> AsyncGenerator[Piece, None]:
        """The pieces after `first`, one by one, until the stream ends."""
        try:
            loop = asyncio.get_running_loop()
            while True:
                asked = loop.time()
                timer = (
                    loop.call_later(self._stall_s, self._stalled)
                    if self._on_stall is not None
                    else None
                )
                try:
                    text = await self.next_text(
                        asked + self._idle_s, f"no text for {self._idle_s:.2f} s mid-answer"
                    )
                finally:
                    if timer is not None:
                        timer.cancel()
                if text is None:
                    break
                self.longest_pause_s = max(self.longest_pause_s, loop.time() - asked)
                yield text
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._response.aclose()

    def completion(self, latency_ms: float, prompt_tokens: int = 0) -> Completion:
        """The whole answer, once the stream is done (for the cache and the ledger). A stream
        whose upstream sent no usage is counted by estimate (`prompt_tokens` for the prompt, the
        text's for the answer), and the completion says so."""
        answer = self.text + "".join(call[1] + call[2] for call in self.calls.values())
        estimated = not (self.tokens_in and self.tokens_out)
        return Completion(
            text=self.text,
            provider=self.provider,
            tokens_in=self.tokens_in or prompt_tokens,
            tokens_out=self.tokens_out or estimate_tokens(answer),
            latency_ms=latency_ms,
            finish_reason=self.finish_reason,
            tool_calls=self.tool_calls,
            reasoning="".join(self.reasoning),
            reasoning_signature=self.reasoning_signature if self.reasoning else "",
            tokens_estimated=estimated,
        )


def _piece_of(kind: Kind, text: str) -> Piece:
    """`text` as a piece of its kind."""
    if kind == TEXT:
        return text
    if kind == THINKING:
        return Reasoning(text)
    return ToolCallDelta(int(kind), arguments=text)
