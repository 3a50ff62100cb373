"""Ollama's native API: `POST /api/chat` (non-streaming) and `GET /api/tags`."""

from __future__ import annotations

from typing import Any

from .base import Completion, CompletionRequest, HealthResult, ProviderAdapter, token_count
from .errors import ProviderError


class OllamaAdapter(ProviderAdapter):
    kind = "ollama"

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion:
        options: dict[str, Any] = {}
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": request.messages(),
            "stream": False,  # Ollama streams unless told otherwise
        }
        if options:
            payload["options"] = options
        body, latency_ms = await self.request_json(
            "POST", "/api/chat", payload=payload, timeout=timeout
        )
        try:
            text = body["message"]["content"]
        except (KeyError, TypeError):
            raise self.malformed("no message.content") from None
        if not isinstance(text, str):
            raise self.malformed("message.content is not text")
        return self.succeeded(
            Completion(
                text=text,
                provider=self.name,
                tokens_in=token_count(body.get("prompt_eval_count")),
                tokens_out=token_count(body.get("eval_count")),
                latency_ms=latency_ms,
            )
        )

    async def health_check(self, *, timeout: float) -> HealthResult:
        try:
            body, latency_ms = await self.request_json("GET", "/api/tags", timeout=timeout)
        except ProviderError as exc:
            return HealthResult(False, 0.0, exc.message, exc.error_class)
        models = body.get("models") if isinstance(body, dict) else None
        names = {m.get("name") for m in models or () if isinstance(m, dict)}
        names |= {m.get("model") for m in models or () if isinstance(m, dict)}
        if self.config.model not in names:
            return HealthResult(False, latency_ms, f"model {self.config.model} is not pulled")
        return HealthResult(True, latency_ms)
