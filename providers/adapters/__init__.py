"""Provider adapters: one class per API dialect, registered by the provider kind it speaks."""

from __future__ import annotations

from .anthropic import AnthropicAdapter
from .base import ProviderAdapter
from .ollama import OllamaAdapter
from .openai import OpenAICompatibleAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OllamaAdapter.kind: OllamaAdapter,
    OpenAICompatibleAdapter.kind: OpenAICompatibleAdapter,
    AnthropicAdapter.kind: AnthropicAdapter,
}
