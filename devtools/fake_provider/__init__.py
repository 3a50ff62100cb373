"""A fake LLM provider speaking Ollama's, OpenAI's and Anthropic's APIs, with faults switchable
at run time (the modes are listed in `config`).

It serves the test suite, the benchmarks (a fast fixed-response upstream) and operators'
failover drills (`manage.py fakeprovider`, `manage.py drill`). Control it in-process through
`FakeProvider`, or over HTTP: `POST /_control/fault`, `GET /_control/stats`,
`POST /_control/reset`, `POST /_control/refuse` (connections refused for a while). What each
call carried is kept for the tests: `FakeProvider.last_request(path)`, and the thinking it
carried back, `FakeProvider.thinking_received(path)`; `images.png` makes real images to send.
Azure OpenAI's paths (`/openai/deployments/{deployment}/chat/completions`, `/openai/models`,
with api-version and the api-key header) and OpenAI's endpoints under any path prefix
(`/v1beta/openai/chat/completions`, Gemini's shape) are in `azure`.
"""

from __future__ import annotations

from devtools.fake_provider.app import FakeProviderApp
from devtools.fake_provider.config import (
    DEFAULT_MODELS,
    DEFAULT_TEXT,
    MODES,
    ConfigError,
    FakeConfig,
)
from devtools.fake_provider.server import (
    FakeProvider,
    FakeProviderServer,
    bind_socket,
    uvicorn_config,
)
from devtools.fake_provider.state import FakeState

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_TEXT",
    "MODES",
    "ConfigError",
    "FakeConfig",
    "FakeProvider",
    "FakeProviderApp",
    "FakeProviderServer",
    "FakeState",
    "bind_socket",
    "uvicorn_config",
]
