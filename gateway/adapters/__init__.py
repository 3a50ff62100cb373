"""Provider adapters: one class per API dialect, registered by the provider kind it speaks."""

from __future__ import annotations

from gateway.adapters.anthropic import AnthropicAdapter
from gateway.adapters.azure import AzureOpenAIAdapter
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.ollama import OllamaAdapter
from gateway.adapters.openai import OpenAICompatibleAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OllamaAdapter.kind: OllamaAdapter,
    OpenAICompatibleAdapter.kind: OpenAICompatibleAdapter,
    AnthropicAdapter.kind: AnthropicAdapter,
    AzureOpenAIAdapter.kind: AzureOpenAIAdapter,
}
