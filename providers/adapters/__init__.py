"""Provider adapters: one class per API dialect, registered by the provider kind it speaks."""

from __future__ import annotations

from providers.adapters.anthropic import AnthropicAdapter
from providers.adapters.azure import AzureOpenAIAdapter
from providers.adapters.base import ProviderAdapter
from providers.adapters.ollama import OllamaAdapter
from providers.adapters.openai import OpenAICompatibleAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OllamaAdapter.kind: OllamaAdapter,
    OpenAICompatibleAdapter.kind: OpenAICompatibleAdapter,
    AnthropicAdapter.kind: AnthropicAdapter,
    AzureOpenAIAdapter.kind: AzureOpenAIAdapter,
}
