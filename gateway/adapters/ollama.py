"""Ollama's native API: `POST /api/chat` (whole, or streamed as one JSON object a line) and
`GET /api/tags`. Its health check has all three levels: the tags answer, the model is pulled, a
one-token chat (`options.num_predict: 1`, not streamed) answers; `GET /api/ps` (the models held
in memory) tells a model that is loading from one that is wedged. An answer's `load_duration`
(the time it spent loading the model) is kept apart from its latency (`Completion.load_s`).

Every chat carries what the provider's row says of the model: `think` (off by default: a
thinking model then answers at once), `options.num_ctx` (its context window; Ollama's own
default is 4096 tokens) and `keep_alive` when set. A model's thinking is its `reasoning`, never
the answer's first token. With an API key (ollama.com, or a proxy in front of a server) every
call carries it as a bearer token.

Ollama has no `tool_choice`. A call forced to one tool (named, or `required` with one tool
offered) is asked for through `format`, the tool's parameters schema, with the request's tools
left out: the model's JSON answer is the call's arguments, given back as one call to that tool
(`tools.forced_by_format`). `required` among several tools can't be held so and is refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.adapters import params, thinking, tools
from gateway.adapters.base import CUT_OFF, ProviderAdapter
from gateway.adapters.errors import ErrorClass, ProviderError, classify_ollama
from gateway.adapters.image_fetch import ImageUnfetched
from gateway.adapters.messages import (
    HEALTH_PROBE,
    Completion,
    CompletionRequest,
    HealthLevel,
    HealthResult,
    Piece,
    Reasoning,
    ToolCall,
    ToolCallDelta,
    token_count,
)
from gateway.adapters.stream import CompletionStream

# A keep_alive that is a bare number is seconds, and Ollama takes it only as a JSON number:
# the string "-1" or "3600" fails its duration parser ("missing unit"); "30m" stays a string.
_SECONDS = re.compile(r"-?\d+(\.\d+)?")
PS_TIMEOUT_S = 1.0  # the health check's look at /api/ps, at most


def load_seconds(value: Any) -> float:
    """An answer's `load_duration` (nanoseconds) in seconds; 0 when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return 0.0
    return float(value) / 1e9


def keep_alive_value(keep_alive: str) -> str | int | float:
    """The provider's keep_alive as Ollama reads it: a number of seconds (negative: keep the
    model loaded, 0: unload it after the answer) or a duration string ("30m", "24h")."""
    if _SECONDS.fullmatch(keep_alive):
        seconds = float(keep_alive)
        return int(seconds) if seconds.is_integer() else seconds
    return keep_alive


class OllamaAdapter(ProviderAdapter):
    kind = "ollama"

    def headers(self) -> dict[str, str]:
        # Ollama's own API needs no key locally; ollama.com (or a proxy) takes a bearer token.
        if self.config.api_key:
            return {"authorization": f"Bearer {self.config.api_key}"}
        return {}

    def payload(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        config = self.config
        # The same num_ctx on every call, the health probe's included: a call with another
        # num_ctx makes Ollama reload the model with that window, and the next chat reload it
        # back. Without one Ollama serves its default (4096), not the window the row says.
        options: dict[str, Any] = {"num_ctx": config.context_window}
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.top_p is not None:
            options["top_p"] = request.top_p
        if request.stop:
            options["stop"] = list(request.stop)
        payload: dict[str, Any] = {
            "model": request.model or config.model,
            "messages": (
                tools.ollama_messages(request, thoughts=config.thinks)
                if request.turns
                else request.messages()
            ),
            "stream": stream,  # Ollama streams unless told otherwise
            "options": options,
            # A thinking model thinks unless told not to; false is taken by every model (only
            # true or a level is refused by one that can't think). The one-token health probe
            # never thinks: its token would be thinking, and the probe would cost a trace.
            "think": (False if request is HEALTH_PROBE else thinking.ollama_think(request, config)),
        }
        if config.keep_alive:
            # The probe too: a call without keep_alive resets the model's stay to Ollama's 5 m.
            payload["keep_alive"] = keep_alive_value(config.keep_alive)
        tools.add_ollama(payload, request)
        params.apply(payload, request.options, self.kind)
        return payload

    def cannot(self, request: CompletionRequest) -> tuple[str, str] | None:
        forced = tools.forced_by_format(request)
        if request.tools and request.tool_choice not in ("", "auto", "none") and not forced:
            why = (
                f"required leaves the model {len(request.tools)} tools to choose from"
                if request.tool_choice == "required"
                else f"{request.tool_choice} is not among the tools"
            )
            return (
                "tool_choice",
                f"Ollama has no tool_choice; a call is forced through format, one tool's "
                f"schema, and {why}",
            )
        if self.image_fetch is None and any(
            not image.data for turn in request.turns for image in turn.images
        ):
            return "images", "Ollama takes an image's bytes, and fetching images is off here"
        if forced and self.config.tools and not self.config.json_output:
            return (
                "tool_choice",
                "Ollama forces a tool call through format, and its settings say it can't give "
                "JSON output",
            )
        return super().cannot(request)

    def call_note(self, request: CompletionRequest) -> str:
        forced = tools.forced_by_format(request)
        held = f"tool call to {forced} held by format" if forced else ""
        return "; ".join(filter(None, (held, thinking.note(request, self.config, self.dialect))))

    async def prepared(self, request: CompletionRequest, *, timeout: float) -> CompletionRequest:
        """The request with each image given by URL fetched (Ollama takes an image's bytes
        only); one that can't be fetched passes this provider over (the next may take the URL)."""
        if self.image_fetch is None:
            return request
        try:
            return await self.image_fetch.inlined(request, timeout=timeout)
        except ImageUnfetched as exc:
            raise self.failures.failed(
                ErrorClass.UNSUPPORTED, f"an image given by URL could not be fetched: {exc}"
            ) from None

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        started = time.perf_counter()
        request = await self.prepared(request, timeout=timeout)
        timeout = max(0.001, timeout - (time.perf_counter() - started))
        body, latency_ms = await self.request_json(
            "POST", "/api/chat", payload=self.payload(request, stream=False), timeout=timeout
        )
        try:
            message = body["message"]
            text = message.get("content")
            thinking = message.get("thinking") or ""
        except (KeyError, TypeError, AttributeError):
            raise self.failures.malformed("no message") from None
        if not isinstance(thinking, str):
            raise self.failures.malformed("message.thinking is not text")
        forced = tools.forced_by_format(request)
        if forced:
            return self._held_call(request, forced, text, body, latency_ms, thinking)
        calls = tools.ollama_calls(message.get("tool_calls"))
        if calls is None:
            raise self.failures.malformed("message.tool_calls is not a list of calls")
        if text is None and calls:
            text = ""
        if not isinstance(text, str):
            raise self.failures.malformed("message.content is not text")
        if not text and not calls:
            self.check_not_empty(request, str(body.get("done_reason") or ""))
        return Completion(
            text=text,
            provider=self.name,
            tokens_in=token_count(body.get("prompt_eval_count")),
            tokens_out=token_count(body.get("eval_count")),
            latency_ms=latency_ms,
            # Ollama says "stop" after a tool call too; OpenAI's clients look for tool_calls.
            finish_reason="tool_calls" if calls else str(body.get("done_reason") or ""),
            tool_calls=calls,
            reasoning=thinking,
            reasoning_signature=self.own_signature() if thinking else "",
            load_s=load_seconds(body.get("load_duration")),
        )

    def _held_call(
        self,
        request: CompletionRequest,
        tool: str,
        text: Any,
        body: dict[str, Any],
        latency_ms: float,
        thinking: str,
    ) -> Completion:
        """The answer held by `format` to `tool`'s arguments, as one call to it. An answer cut
        at its token limit keeps the arguments as far as they came, as OpenAI gives them."""
        if not isinstance(text, str):
            raise self.failures.malformed("message.content is not text")
        finish = str(body.get("done_reason") or "")
        if not text:
            self.check_not_empty(request, finish)
        arguments: str | None = text
        if finish not in CUT_OFF:
            arguments = tools.held_arguments(text)
            if arguments is None:  # it answered, but not what was asked: the next provider
                raise self.failures.failed(
                    ErrorClass.NON_COMPLIANT,
                    f"the arguments held by format for {tool} are not a JSON object",
                )
            finish = "tool_calls"
        return Completion(
            text="",
            provider=self.name,
            tokens_in=token_count(body.get("prompt_eval_count")),
            tokens_out=token_count(body.get("eval_count")),
            latency_ms=latency_ms,
            finish_reason=finish,
            tool_calls=(ToolCall(tools.new_call_id(), tool, arguments),) if arguments else (),
            reasoning=thinking,
            reasoning_signature=self.own_signature() if thinking else "",
        )

    def _status_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        """Ollama's error statuses in its own words (`classify_ollama`): a busy server's 503
        cools down, a model lacking a capability asked for is skipped for the request."""
        error = super()._status_error(status, headers, body)
        error_class = classify_ollama(status, error.message)
        if error_class == error.error_class:
            return error
        return ProviderError(
            error_class, error.message, status=error.status, retry_after_s=error.retry_after_s
        )

    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        return "/api/chat", self.payload(request, stream=True)

    def stream_decoder(self, request: CompletionRequest) -> OllamaStreamDecoder:
        return OllamaStreamDecoder(self, tools.forced_by_format(request))

    embeds = True

    async def embed(self, request: CompletionRequest, *, timeout: float) -> Completion:
        """`POST /api/embed`, with `truncate: false`: an input past the model's context is an
        error (context too long, so a larger window may serve it), never silently cut."""
        payload: dict[str, Any] = {
            "model": self.embedding_model(request),
            "input": list(request.embed),
            "truncate": False,  # (no num_ctx: the row's window is its chat model's)
        }
        if request.dimensions is not None:
            payload["dimensions"] = request.dimensions
        if self.config.keep_alive:
            payload["keep_alive"] = keep_alive_value(self.config.keep_alive)
        body, latency_ms = await self.request_json(
            "POST", "/api/embed", payload=payload, timeout=timeout
        )
        if not isinstance(body, dict):
            raise self.failures.malformed("the body is not an object")
        return Completion(
            text="",
            provider=self.name,
            tokens_in=token_count(body.get("prompt_eval_count")),
            tokens_out=0,
            latency_ms=latency_ms,
            embeddings=self.vectors(body.get("embeddings"), len(request.embed)),
        )

    @property
    def paid_inference(self) -> bool:
        return False  # self-hosted: a token costs nothing, so inference is always checked

    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        """The levels (`health_levels` on /api/tags); with `inference`, /api/ps first: a
        one-token answer that times out while the server answers and doesn't list the model
        as loaded is a model loading (`HealthResult.loading`, a good result), not a failure."""
        if not inference:
            return await self.health_levels("/api/tags", timeout=timeout, inference=False)
        started = time.perf_counter()
        loading = await self.model_loading(timeout=min(PS_TIMEOUT_S, timeout / 4))
        left = max(0.001, timeout - (time.perf_counter() - started))
        result = await self.health_levels("/api/tags", timeout=left, inference=True)
        timed_out = result.error_class == ErrorClass.TIMEOUT
        if loading and timed_out and result.level == HealthLevel.INFERENCE:
            detail = f"model {self.config.model} is loading (not yet in /api/ps)"
            return replace(result, ok=True, detail=detail, error_class=None, loading=True)
        return result

    async def model_loading(self, *, timeout: float) -> bool:
        """Ollama lists the models it holds in memory at /api/ps; one it doesn't list is loaded
        by the next call (after a restart, or unloaded once its keep_alive ran out)."""
        try:
            body, _ = await self.request_json("GET", "/api/ps", timeout=timeout)
        except ProviderError:
            return False  # the server doesn't answer: wedged, not loading
        return not self._lists_model(body)

    def model_problem(self, body: Any) -> str:
        return "" if self._lists_model(body) else f"model {self.config.model} is not pulled"

    def _lists_model(self, body: Any) -> bool:
        models = body.get("models") if isinstance(body, dict) else None
        names = {m.get("name") for m in models or () if isinstance(m, dict)}
        names |= {m.get("model") for m in models or () if isinstance(m, dict)}
        model = self.config.model
        # Ollama lists "llama3.1:latest" for a model asked for as "llama3.1".
        return model in names or (":" not in model and f"{model}:latest" in names)


class OllamaStreamDecoder:
    """/api/chat's stream, one JSON object a line. It keeps the tool call a forced request's
    `format` holds (`json_tool`): that call's arguments come as the answer's text."""

    framing = "ndjson"

    def __init__(self, adapter: OllamaAdapter, json_tool: str) -> None:
        self.adapter = adapter
        self.failures = adapter.failures
        self.json_tool = json_tool

    def decode(self, event: Any, stream: CompletionStream) -> Piece:
        if not isinstance(event, dict):
            raise self.failures.malformed("a stream line is not an object")
        if event.get("error"):
            # Mid-stream the status is already 200: the error is a line {"error": "..."}.
            detail = self.adapter.upstream_text(str(event["error"]), 480)
            raise self.failures.failed(ErrorClass.SERVER_ERROR, f"error line: {detail}")
        message = event.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        thinking = message.get("thinking") if isinstance(message, dict) else None
        if event.get("done") is True:
            stream.done = True
            stream.finish_reason = str(event.get("done_reason") or "stop")
            if stream.calls and not self.json_tool:  # a call held by format: _held_pieces
                stream.finish_reason = "tool_calls"
            stream.tokens_in = token_count(event.get("prompt_eval_count"))
            stream.tokens_out = token_count(event.get("eval_count"))
        # A line's thinking first, then its text, then its calls (each sent whole, in one
        # line: one piece a call); the first is returned, the others are given next.
        pieces: list[Piece] = []
        if thinking and isinstance(thinking, str):
            pieces.append(Reasoning(thinking))
        if self.json_tool:
            pieces += self._held_pieces(text if isinstance(text, str) else "", stream)
        else:
            calls = (
                tools.ollama_calls(message.get("tool_calls")) if isinstance(message, dict) else ()
            )
            if calls is None:
                raise self.failures.malformed("message.tool_calls is not a list of calls")
            if text and isinstance(text, str):
                pieces.append(text)
            pieces += [
                ToolCallDelta(len(stream.calls) + offset, call.id, call.name, call.arguments)
                for offset, call in enumerate(calls)
            ]
        if not pieces:
            return ""
        stream.queued.extend(pieces[1:])
        return pieces[0]

    def _held_pieces(self, text: str, stream: CompletionStream) -> list[Piece]:
        """A line of an answer held by `format` to the arguments of `json_tool`: the
        first text names the call (a piece of its own), then each text adds to its arguments.
        Text that can't begin a JSON object fails before anything is handed on (non-compliant:
        the next provider is asked); arguments that are not a JSON object at the end break the
        stream there (malformed; unless cut at the token limit)."""
        call = stream.calls.get(0)
        pieces: list[Piece] = []
        if call is None:
            text = text.lstrip()  # what a model may send before the object
            if text and not text.startswith("{"):
                raise self.failures.failed(
                    ErrorClass.NON_COMPLIANT,
                    f"the answer held by format for {self.json_tool} is not a JSON object",
                )
            if text:
                pieces.append(ToolCallDelta(0, tools.new_call_id(), self.json_tool))
        if text:
            pieces.append(ToolCallDelta(0, arguments=text))
        ended = stream.done and stream.finish_reason not in CUT_OFF
        if ended and (call is not None or text):
            answered = (call[2] if call is not None else "") + text
            if tools.held_arguments(answered) is None:
                raise self.failures.malformed(
                    f"the arguments held by format for {self.json_tool} are not a JSON object"
                )
            stream.finish_reason = "tool_calls"
        return pieces
