"""The fake provider's routes beyond its fixed paths: Azure OpenAI's, and OpenAI's dialect under
any path prefix.

- Azure's deployments API: `POST /openai/deployments/{deployment}/chat/completions` answers in
  OpenAI's dialect with the deployment as the model (the body needs none), and
  `GET /openai/models` lists the fake's models. Both need the `api-version` query parameter
  (Azure's 404 "Resource not found" without it), and when the fake has an api_key, the
  `api-key: <key>` header (Azure's 401 otherwise; a bearer token is not a key there). A
  deployment that isn't one of the fake's models is Azure's 404 DeploymentNotFound.
- OpenAI's dialect under a prefix: any other path ending in /chat/completions, /models or
  /embeddings is that OpenAI endpoint ("/v1beta/openai/chat/completions", as Gemini's base URL
  has it, or a proxy's "/llm/openai/v1/models"), its key a bearer token. Under /openai/v1/
  (Azure's v1 API) the `api-key` header is taken as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs

from devtools.fake_provider import dialects
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import OPENAI, Reply

DEPLOYMENTS = "/openai/deployments/"
AZURE_V1 = "/openai/v1/"
# (method, the path's ending) -> OpenAI's endpoint
_ENDINGS = {
    ("POST", "/chat/completions"): "chat",
    ("GET", "/models"): "models",
    ("POST", "/embeddings"): "embed",
}
UNAUTHORIZED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
    "a valid key for an active subscription and use a correct regional API endpoint for your "
    "resource."
)
DEPLOYMENT_NOT_FOUND = (
    "The API deployment for this resource does not exist. If you created the deployment within "
    "the last 5 minutes, please wait a moment and try again."
)


@dataclass(frozen=True, slots=True)
class Route:
    endpoint: str  # OpenAI's: chat / models / embed
    azure: bool = False  # Azure's deployments API: api-version and the api-key header
    deployment: str = ""  # the path's deployment (Azure's chat)
    api_key_header: bool = False  # the api-key header is a key here (Azure's APIs)


def route(method: str, path: str) -> Route | None:
    """The route of a path the fixed table doesn't hold; None for none."""
    if path.startswith(DEPLOYMENTS):
        deployment, _, rest = path[len(DEPLOYMENTS) :].partition("/")
        if method == "POST" and deployment and rest == "chat/completions":
            return Route("chat", azure=True, deployment=deployment, api_key_header=True)
        return None
    if (method, path) == ("GET", "/openai/models"):
        return Route("models", azure=True, api_key_header=True)
    for (wanted, ending), endpoint in _ENDINGS.items():
        if method == wanted and path.endswith(ending):
            return Route(endpoint, api_key_header=path.startswith(AZURE_V1))
    return None


def refusal(found: Route, config: FakeConfig, query: str, headers: dict[str, str]) -> Reply | None:
    """Azure's answer to a call it turns away before reading it; None when it goes on."""
    if found.azure and not parse_qs(query).get("api-version"):
        return azure_error(404, "404", "Resource not found")
    if config.api_key and not authorized(found, config.api_key, headers):
        if found.azure:
            return azure_error(401, "401", UNAUTHORIZED)
        return dialects.error(OPENAI, "unauthorized")
    if found.deployment and found.deployment not in config.models:
        return azure_error(404, "DeploymentNotFound", DEPLOYMENT_NOT_FOUND)
    return None


def authorized(found: Route, api_key: str, headers: dict[str, str]) -> bool:
    if found.api_key_header and headers.get("api-key") == api_key:
        return True
    return not found.azure and headers.get("authorization") == f"Bearer {api_key}"


def with_deployment(body: bytes, deployment: str) -> bytes:
    """The chat body with the path's deployment as its model ("": no deployment, the body as
    it came; a body that isn't an object is left for the chat's own 400)."""
    if not deployment:
        return body
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict):
        return body
    request["model"] = deployment
    return json.dumps(request).encode()


def azure_error(status: int, code: str, message: str) -> Reply:
    """An error in Azure's shape: OpenAI's envelope with Azure's code."""
    return dialects.json_reply(status, {"error": {"code": code, "message": message}})
