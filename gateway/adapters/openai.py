"""OpenAI-compatible APIs (OpenAI, Gemini's compatible API, vLLM, llama.cpp server, LM Studio,
most gateways): `POST {base}/chat/completions` (whole or streamed as server-sent events) and
`GET {base}/models`, with a bearer key. The base is the provider's base URL as OpenAI's SDKs
take it, a bare origin meaning its /v1 (`gateway.engine.config.api_base`)."""

from __future__ import annotations

from typing import Any

from gateway.adapters import params, thinking, tools
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass
from gateway.adapters.messages import (
    Completion,
    CompletionRequest,
    HealthResult,
    Piece,
    Reasoning,
    ToolCallDelta,
    token_count,
)
from gateway.adapters.stream import CompletionStream


class OpenAICompatibleAdapter(ProviderAdapter):
    kind = "openai"
    # Under the API's base URL (`ProviderConfig.http_base_url`).
    models_path = "/models"
    embeds = True

    def chat_path(self, request: CompletionRequest) -> str:
        """Where `request` is posted, under the API's base URL."""
        return "/chat/completions"

    def embeddings_path(self, model: str) -> str:
        return "/embeddings"

    async def embed(self, request: CompletionRequest, *, timeout: float) -> Completion:
        """`POST {base}/embeddings`, always as floats (the gateway encodes base64 itself)."""
        model = self.embedding_model(request)
        body, latency_ms = await self.request_json(
            "POST",
            self.embeddings_path(model),
            payload=self.embed_payload(request),
            timeout=timeout,
        )
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise self.failures.malformed("no data list of embeddings")
        ordered = sorted(data, key=lambda item: item.get("index") or 0)
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return Completion(
            text="",
            provider=self.name,
            tokens_in=token_count(usage.get("prompt_tokens")),
            tokens_out=0,
            latency_ms=latency_ms,
            embeddings=self.vectors(
                [item.get("embedding") for item in ordered], len(request.embed)
            ),
        )

    def embed_payload(self, request: CompletionRequest) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.embedding_model(request),
            "input": list(request.embed),
            "encoding_format": "float",
        }
        if request.dimensions is not None:
            payload["dimensions"] = request.dimensions
        params.apply(payload, request.options, self.dialect)
        return payload

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def payload(self, request: CompletionRequest) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": request.messages(),
        }
        if request.max_tokens is not None:
            # OpenAI's reasoning models take only max_completion_tokens; many compatible
            # servers only max_tokens: the provider's row says which this one takes.
            payload[self.config.token_limit_field] = request.max_tokens
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.top_p is not None:
            payload["top_p"] = request.top_p
        if request.stop:
            payload["stop"] = list(request.stop)
        tools.add_openai(payload, request)
        params.apply(payload, request.options, self.dialect)
        effort = thinking.openai_effort(request, self.config)
        if effort:
            payload["reasoning_effort"] = effort
        return payload

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        body, latency_ms = await self.request_json(
            "POST", self.chat_path(request), payload=self.payload(request), timeout=timeout
        )
        try:
            message = body["choices"][0]["message"]
            text = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self.failures.malformed("no choices[0].message") from None
        calls = tools.openai_calls(message.get("tool_calls"))
        if calls is None:
            raise self.failures.malformed("choices[0].message.tool_calls is not a list of calls")
        if text is None and calls:
            text = ""
        if not isinstance(text, str):
            # A null content without a call is a refusal: nothing a frontend can show.
            raise self.failures.malformed("choices[0].message.content is not text")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        finish_reason = body["choices"][0].get("finish_reason")
        if not text and not calls:
            self.check_not_empty(request, str(finish_reason or ""))
        thought = thinking.reasoning_text(message)
        return Completion(
            text=text,
            provider=self.name,
            tokens_in=token_count(usage.get("prompt_tokens")),
            tokens_out=token_count(usage.get("completion_tokens")),
            latency_ms=latency_ms,
            # Gemini's compatible API ends tool calls with "stop": a call is a call.
            finish_reason="tool_calls" if calls else str(finish_reason or ""),
            tool_calls=calls,
            reasoning=thought,
            reasoning_signature=self.own_signature() if thought else "",
        )

    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        payload = self.payload(request)
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        return self.chat_path(request), payload

    def stream_decoder(self, request: CompletionRequest) -> OpenAIStreamDecoder:
        return OpenAIStreamDecoder(self)

    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        return await self.health_levels(self.models_path, timeout=timeout, inference=inference)

    def model_problem(self, body: Any) -> str:
        data = body.get("data") if isinstance(body, dict) else None
        ids = {m.get("id") for m in data or () if isinstance(m, dict)}
        # Some compatible servers list nothing at all: only a list without the model says no.
        if ids and self.config.model not in ids:
            return f"model {self.config.model} is not served"
        return ""


class OpenAIStreamDecoder:
    """Chat Completions chunks, as server-sent events: the text and tool-call deltas of the
    first choice, the usage in the last chunk (`stream_options.include_usage`)."""

    framing = "sse"

    def __init__(self, adapter: OpenAICompatibleAdapter) -> None:
        self.adapter = adapter
        self.failures = adapter.failures

    def decode(self, event: Any, stream: CompletionStream) -> Piece:
        if not isinstance(event, dict):
            raise self.failures.malformed("a stream event is not an object")
        if event.get("error"):
            raise self.failures.failed(
                ErrorClass.SERVER_ERROR, f"error event: {self.adapter.error_text(event)}"
            )
        usage = event.get("usage")
        if isinstance(usage, dict):
            stream.tokens_in = token_count(usage.get("prompt_tokens"))
            stream.tokens_out = token_count(usage.get("completion_tokens"))
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        delta = choice.get("delta")
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        pieces = [self._call_delta(call, stream) for call in calls or ()]
        if choice.get("finish_reason"):
            # Gemini's compatible API ends tool calls with "stop": a call is a call.
            called = stream.calls or pieces
            stream.finish_reason = "tool_calls" if called else str(choice["finish_reason"])
        if pieces:
            stream.queued.extend(pieces[1:])
            return pieces[0]
        text = delta.get("content") if isinstance(delta, dict) else None
        if not text and isinstance(delta, dict):
            thought = thinking.reasoning_text(delta)
            if thought:
                return Reasoning(thought)
        return text if isinstance(text, str) else ""

    def _call_delta(self, raw: Any, stream: CompletionStream) -> ToolCallDelta:
        """One tool-call piece of a chunk. Gemini's compatible API gives no `index`: a piece
        with a new id starts the next call, one without goes on with the last."""
        if not isinstance(raw, dict):
            raise self.failures.malformed("a tool-call delta is not an object")
        call_id = raw["id"] if isinstance(raw.get("id"), str) else ""
        index = raw.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            known = {call[0]: at for at, call in stream.calls.items()}
            known.update(
                {
                    piece.id: piece.index
                    for piece in stream.queued
                    if isinstance(piece, ToolCallDelta)
                }
            )
            last = max([*stream.calls, *known.values()], default=-1)
            if call_id and call_id not in known:
                index = last + 1
            else:
                index = known.get(call_id, max(last, 0))
        function = raw.get("function")
        if not isinstance(function, dict):
            function = {}
        name, arguments = function.get("name"), function.get("arguments")
        return ToolCallDelta(
            index=index,
            id=call_id,
            name=name if isinstance(name, str) else "",
            arguments=arguments if isinstance(arguments, str) else "",
        )
