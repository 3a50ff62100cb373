"""Azure OpenAI: OpenAI's dialect at Azure's paths, with Azure's `api-key` header.

Two shapes of the API, told apart by the base URL (`gateway.engine.config.api_base`):

- The deployments API, under the resource's endpoint (https://RES.openai.azure.com): chat at
  `POST /openai/deployments/{deployment}/chat/completions?api-version={api_version}` (the row's
  model is the deployment's name; the path names it, so the body carries no model), the
  health check's list at `GET /openai/models?api-version=…`: the models the resource may use.
  That list answering says the endpoint, the key and the api-version are good; it names no
  deployment (only Azure's control plane lists those), so only a one-token inference proves
  the deployment itself.
- The v1 API, a base URL ending in /openai/v1: OpenAI's own paths under it
  (/chat/completions, /models), the deployment's name as the body's model, and the api-version
  this API takes: "v1" (or "preview"). (OpenAI's SDKs reach it with the key as a bearer token,
  which it takes too: the openai kind with that base URL works as well, sending no api-version.)

Streams are OpenAI's server-sent events and errors OpenAI's shape, so the rest is the
OpenAI-compatible adapter's.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from gateway.adapters import params
from gateway.adapters.image_fetch import ImageFetch
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.openai import OpenAICompatibleAdapter
from gateway.engine.config import ProviderConfig

V1_SUFFIX = "/openai/v1"


class AzureOpenAIAdapter(OpenAICompatibleAdapter):
    kind = "azure"

    def __init__(
        self,
        config: ProviderConfig,
        client: httpx.AsyncClient,
        image_fetch: ImageFetch | None = None,
    ) -> None:
        super().__init__(config, client, image_fetch)
        self.v1 = config.http_base_url.endswith(V1_SUFFIX)
        self._version = "?api-version=" + quote(config.api_version, safe="")
        self.models_path = ("/models" if self.v1 else "/openai/models") + self._version

    @property
    def dialect(self) -> str:
        return params.OPENAI

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.config.api_key:
            headers["api-key"] = self.config.api_key
        return headers

    def chat_path(self, request: CompletionRequest) -> str:
        if self.v1:
            return "/chat/completions" + self._version
        # A model an alias names is another deployment of the same resource.
        deployment = quote(request.model or self.config.model, safe="")
        return f"/openai/deployments/{deployment}/chat/completions{self._version}"

    def embeddings_path(self, model: str) -> str:
        if self.v1:
            return "/embeddings" + self._version
        return f"/openai/deployments/{quote(model, safe='')}/embeddings{self._version}"

    def embed_payload(self, request: CompletionRequest) -> dict[str, Any]:
        payload = super().embed_payload(request)
        if not self.v1:
            del payload["model"]  # the path names the deployment
        return payload

    def payload(self, request: CompletionRequest) -> dict[str, Any]:
        payload = super().payload(request)
        if not self.v1:
            del payload["model"]  # the path names the deployment
        return payload

    def model_problem(self, body: Any) -> str:
        # The list holds models, not deployments: the deployment's name is in none of it.
        data = body.get("data") if isinstance(body, dict) else None
        return "" if isinstance(data, list) else "the model list has no data list"
