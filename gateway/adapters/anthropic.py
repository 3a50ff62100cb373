"""Anthropic's Messages API: `POST /v1/messages` (whole, or streamed as server-sent events) and
`GET /v1/models`."""

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
    ToolCall,
    ToolCallDelta,
    token_count,
)
from gateway.adapters.stream import CompletionStream

API_VERSION = "2023-06-01"
# The Messages API requires max_tokens; a request that names none gets this many.
DEFAULT_MAX_TOKENS = 1024
# Error events inside a stream, by their type: the same classes their HTTP statuses get.
_STREAM_ERRORS = {
    "overloaded_error": ErrorClass.RATE_LIMITED,
    "rate_limit_error": ErrorClass.RATE_LIMITED,
    "authentication_error": ErrorClass.AUTH,
    "permission_error": ErrorClass.AUTH,
}


class AnthropicAdapter(ProviderAdapter):
    kind = "anthropic"

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key
        return headers

    def dropped(self, request: CompletionRequest) -> tuple[str, ...]:
        names = list(super().dropped(request))
        asked = request.thinking
        field = thinking.anthropic_field(request, self.config)
        if asked is not None and asked.on and field is None:
            names.append("thinking")
        if field is not None:
            names += [
                name
                for name in thinking.NOT_WITH_THINKING
                if getattr(request, name, None) is not None or request.option(name) is not None
            ]
        if request.option("output_config") is not None and not self.config.thinks:
            names.append("output_config")
        return tuple(dict.fromkeys(names))

    def own_signature(self) -> str:
        return ""  # Anthropic signs its own thinking

    def payload(self, request: CompletionRequest) -> dict[str, Any]:
        # The system prompt is a top-level field here, not a message; a system message
        # elsewhere in the conversation joins it, in order.
        keep = self.config.thinks
        messages, inline_system = (
            tools.anthropic_messages(request.turns, thoughts=keep)
            if request.turns
            else tools.anthropic_history(request.messages(with_system=False))
        )
        payload: dict[str, Any] = {
            "model": request.model or self.config.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        system = "\n\n".join(filter(None, (request.system_prompt, *inline_system)))
        if system:
            payload["system"] = system
        if request.temperature is not None:
            payload["temperature"] = min(request.temperature, 1.0)  # Anthropic's range is 0–1
        if request.top_p is not None:
            payload["top_p"] = request.top_p
        if request.stop:
            payload["stop_sequences"] = list(request.stop)
        tools.add_anthropic(payload, request)
        params.apply(payload, request.options, self.kind)
        field = thinking.anthropic_field(request, self.config)
        if field is not None:
            payload["thinking"] = field
            for name in thinking.NOT_WITH_THINKING:
                payload.pop(name, None)
            if payload.get("tool_choice", {}).get("type") in ("any", "tool"):
                # Thinking takes only auto or none: a forced call is left to the model.
                payload["tool_choice"] = {"type": "auto"}
        if not self.config.thinks:
            payload.pop("output_config", None)
        return payload

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        body, latency_ms = await self.request_json(
            "POST",
            "/v1/messages",
            payload=self.payload(request),
            timeout=timeout,
            extra=self.request_headers(request),
        )
        blocks = body.get("content") if isinstance(body, dict) else None
        if not isinstance(blocks, list):
            raise self.failures.malformed("no content blocks")
        json_tool = tools.json_tool_name(request)
        texts: list[str] = []
        calls: list[ToolCall] = []
        thoughts: list[str] = []
        signature = ""
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thoughts.append(block["thinking"])
                signature = str(block.get("signature") or "")
            elif kind == "tool_use" and isinstance(block.get("name"), str):
                arguments = tools.arguments_text(block.get("input"))
                if json_tool and block["name"] == json_tool:
                    texts = [arguments]  # the forced tool's input is the JSON answer
                    json_tool = ""
                    continue
                calls.append(ToolCall(str(block.get("id") or ""), block["name"], arguments))
        if not "".join(texts) and not calls:
            self.check_not_empty(request, str(body.get("stop_reason") or ""))
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        stop_reason = str(body.get("stop_reason") or "")
        return Completion(
            text="".join(texts),
            provider=self.name,
            tokens_in=token_count(usage.get("input_tokens")),
            tokens_out=token_count(usage.get("output_tokens")),
            latency_ms=latency_ms,
            # A forced JSON tool's call is the answer, not a call for the client to make.
            finish_reason="end_turn" if stop_reason == "tool_use" and not calls else stop_reason,
            tool_calls=tuple(calls),
            reasoning="".join(thoughts),
            reasoning_signature=signature if thoughts else "",
        )

    def stream_request(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        payload = self.payload(request)
        payload["stream"] = True
        return "/v1/messages", payload

    def cannot(self, request: CompletionRequest) -> tuple[str, str] | None:
        if request.output is not None and request.tools:
            return (
                "response_format",
                "Anthropic is asked for JSON as one forced tool, which leaves the request's own "
                "tools no call",
            )
        return super().cannot(request)

    def stream_decoder(self, request: CompletionRequest) -> AnthropicStreamDecoder:
        return AnthropicStreamDecoder(self, tools.json_tool_name(request))

    async def health_check(self, *, timeout: float, inference: bool = False) -> HealthResult:
        # The model list names dated versions, not aliases like "-latest": a good answer from
        # it (which also proves the key) is the check, so `model_problem` stays silent.
        return await self.health_levels("/v1/models", timeout=timeout, inference=inference)


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else -1


class AnthropicStreamDecoder:
    """The Messages API's typed events, as server-sent events. It keeps which content block is
    which tool call, and the forced JSON tool (`json_tool`) whose input is the answer's text."""

    framing = "sse"

    def __init__(self, adapter: AnthropicAdapter, json_tool: str) -> None:
        self.adapter = adapter
        self.failures = adapter.failures
        self.json_tool = json_tool
        self.blocks: dict[int, int] = {}  # the event's block index → its tool call's index

    def decode(self, event: Any, stream: CompletionStream) -> Piece:
        """message_start → content_block_start → content_block_delta … → content_block_stop →
        message_delta → message_stop, with `ping` and `error` events possible anywhere."""
        if not isinstance(event, dict):
            raise self.failures.malformed("a stream event is not an object")
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                text = delta.get("text")
                return text if isinstance(text, str) else ""
            if isinstance(delta, dict) and delta.get("type") == "thinking_delta":
                thought = delta.get("thinking")
                return Reasoning(thought) if isinstance(thought, str) and thought else ""
            if isinstance(delta, dict) and delta.get("type") == "signature_delta":
                stream.reasoning_signature = str(delta.get("signature") or "")
                return ""
            if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
                partial = delta.get("partial_json")
                partial = partial if isinstance(partial, str) else ""
                index = self.blocks.get(_index(event))
                if index is None:  # the forced JSON tool's input: the answer's text
                    return partial
                return ToolCallDelta(index, arguments=partial) if partial else ""
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                name = str(block.get("name") or "")
                if self.json_tool and name == self.json_tool:
                    return ""
                index = self.blocks[_index(event)] = len(self.blocks)
                return ToolCallDelta(index, id=str(block.get("id") or ""), name=name)
        elif kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                stream.tokens_in = token_count(usage.get("input_tokens"))
        elif kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict):
                stream.tokens_out = token_count(usage.get("output_tokens"))
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                reason = str(delta["stop_reason"])
                # A forced JSON tool's call is the answer, not a call for the client to make.
                json_only = reason == "tool_use" and not self.blocks
                stream.finish_reason = "end_turn" if json_only else reason
        elif kind == "message_stop":
            stream.done = True
        elif kind == "error":
            error = event.get("error")
            error_type = error.get("type") if isinstance(error, dict) else None
            error_class = _STREAM_ERRORS.get(str(error_type), ErrorClass.SERVER_ERROR)
            raise self.failures.failed(
                error_class, f"error event: {self.adapter.error_text(event)}"
            )
        return ""
