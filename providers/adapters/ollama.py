"""Ollama's native API: `POST /api/chat` (whole, or streamed as one JSON object a line) and
`GET /api/tags`. Its health check has all three levels: the tags answer, the model is pulled, a
one-token chat (`options.num_predict: 1`, not streamed) answers."""

from __future__ import annotations

from typing import Any

from providers.adapters import params, tools
from providers.adapters.base import ProviderAdapter
from providers.adapters.errors import ErrorClass
from providers.adapters.messages import (
    Completion,
    CompletionRequest,
    HealthResult,
    Piece,
    ToolCallDelta,
    token_count,
)
from providers.adapters.stream import CompletionStream


class OllamaAdapter(ProviderAdapter):
    kind = "ollama"
    stream_framing = "ndjson"

    def payload(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.top_p is not None:
            options["top_p"] = request.top_p
        if request.stop:
            options["stop"] = list(request.stop)
        payload: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": tools.ollama_messages(request) if request.turns else request.messages(),
            "stream": stream,  # Ollama streams unless told otherwise
        }
        if options:
            payload["options"] = options
        tools.add_ollama(payload, request)
        params.apply(payload, request.options, self.kind)
        return payload

    def cannot(self, request: CompletionRequest) -> tuple[str, str] | None:
        if request.tools and request.tool_choice not in ("", "auto", "none"):
            return "tool_choice", "Ollama can't be made to call a tool; only to be offered one"
        return super().cannot(request)

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        body, latency_ms = await self.request_json(
            "POST", "/api/chat", payload=self.payload(request, stream=False), timeout=timeout
        )
        try:
            message = body["message"]
            text = message.get("content")
        except (KeyError, TypeError, AttributeError):
            raise self.malformed("no message") from None
        calls = tools.ollama_calls(message.get("tool_calls"))
        if calls is None:
            raise self.malformed("message.tool_calls is not a list of calls")
        if text is None and calls:
            text = ""
        if not isinstance(text, str):
            raise self.malformed("message.content is not text")
        return Completion(
            text=text,
            provider=self.name,
            tokens_in=token_count(body.get("prompt_eval_count")),
            tokens_out=token_count(body.get("eval_count")),
            latency_ms=latency_ms,
            # Ollama says "stop" after a tool call too; OpenAI's clients look for tool_calls.
            finish_reason="tool_calls" if calls else str(body.get("done_reason") or ""),
            tool_calls=calls,
        )

    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        return "/api/chat", self.payload(request, stream=True)

    def stream_event(self, event: Any, stream: CompletionStream) -> Piece:
        if not isinstance(event, dict):
            raise self.malformed("a stream line is not an object")
        if event.get("error"):
            detail = self.upstream_text(str(event["error"]), 480)
            raise self._failed(ErrorClass.SERVER_ERROR, f"error line: {detail}")
        message = event.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if event.get("done") is True:
            stream.done = True
            stream.finish_reason = str(event.get("done_reason") or "stop")
            if stream.calls:
                stream.finish_reason = "tool_calls"
            stream.tokens_in = token_count(event.get("prompt_eval_count"))
            stream.tokens_out = token_count(event.get("eval_count"))
        calls = tools.ollama_calls(message.get("tool_calls")) if isinstance(message, dict) else ()
        if calls is None:
            raise self.malformed("message.tool_calls is not a list of calls")
        if calls:
            # Ollama sends each call whole, in one line: one piece a call.
            pieces = [
                ToolCallDelta(len(stream.calls) + offset, call.id, call.name, call.arguments)
                for offset, call in enumerate(calls)
            ]
            stream.queued.extend(pieces[1:])
            if text:
                stream.queued.appendleft(pieces[0])
                return text
            return pieces[0]
        return text if isinstance(text, str) else ""

    @property
    def paid_inference(self) -> bool:
        return False  # self-hosted: a token costs nothing, so inference is always checked

    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        return await self.health_levels("/api/tags", timeout=timeout, inference=inference)

    def model_problem(self, body: Any) -> str:
        models = body.get("models") if isinstance(body, dict) else None
        names = {m.get("name") for m in models or () if isinstance(m, dict)}
        names |= {m.get("model") for m in models or () if isinstance(m, dict)}
        model = self.config.model
        # Ollama lists "llama3.1:latest" for a model asked for as "llama3.1".
        if model in names or (":" not in model and f"{model}:latest" in names):
            return ""
        return f"model {model} is not pulled"
