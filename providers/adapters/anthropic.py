"""Anthropic's Messages API: `POST /v1/messages` (non-streaming) and `GET /v1/models`."""

from __future__ import annotations

from typing import Any

from .base import Completion, CompletionRequest, HealthResult, ProviderAdapter, token_count
from .errors import ProviderError

API_VERSION = "2023-06-01"
# The Messages API requires max_tokens; a request that names none gets this many.
DEFAULT_MAX_TOKENS = 1024


class AnthropicAdapter(ProviderAdapter):
    kind = "anthropic"

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key
        return headers

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        # The system prompt is a top-level field here, not a message.
        payload: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": [{"role": "user", "content": request.prompt}],
        }
        if request.system_prompt:
            payload["system"] = request.system_prompt
        if request.temperature is not None:
            payload["temperature"] = min(request.temperature, 1.0)  # Anthropic's range is 0–1
        body, latency_ms = await self.request_json(
            "POST", "/v1/messages", payload=payload, timeout=timeout
        )
        blocks = body.get("content") if isinstance(body, dict) else None
        if not isinstance(blocks, list):
            raise self.malformed("no content blocks")
        texts = [
            block["text"]
            for block in blocks
            if isinstance(block, dict) and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]  # fmt: skip
        if not texts:
            raise self.malformed("no text block in the content")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return self.succeeded(
            Completion(
                text="".join(texts),
                provider=self.name,
                tokens_in=token_count(usage.get("input_tokens")),
                tokens_out=token_count(usage.get("output_tokens")),
                latency_ms=latency_ms,
            )
        )

    async def health_check(self, *, timeout: float) -> HealthResult:
        # The model list names dated versions, not aliases like "-latest": a good answer from
        # it (which also proves the key) is the check.
        try:
            _, latency_ms = await self.request_json("GET", "/v1/models", timeout=timeout)
        except ProviderError as exc:
            return HealthResult(False, 0.0, exc.message, exc.error_class)
        return HealthResult(True, latency_ms)
