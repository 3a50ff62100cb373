from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path

from edge import front_door, handlers, metrics_scrape, probes
from edge.api import openapi, status
from edge.api.anthropic import messages
from edge.api.complete import endpoint as complete
from edge.api.openai import chat as openai_chat
from edge.api.openai import embeddings, responses
from edge.api.openai import models as openai_models

urlpatterns = [
    # The browser's front door and the API reference: pages, outside /api/ and /v1/.
    path("", front_door.index, name="front-door"),
    path("docs/api/", front_door.api_reference, name="api-reference"),
    path("favicon.ico", front_door.favicon, name="favicon"),
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics_scrape.metrics, name="metrics"),
    path("api/v1/complete", complete.complete, name="api-complete"),
    path("api/v1/status", status.status, name="api-status"),
    path("api/openapi.json", openapi.openapi_json, name="api-openapi"),
    path("v1/chat/completions", openai_chat.chat_completions, name="openai-chat-completions"),
    path("v1/responses", responses.responses, name="openai-responses"),
    path("v1/embeddings", embeddings.embeddings, name="openai-embeddings"),
    path("v1/messages", messages.messages, name="anthropic-messages"),
    path("v1/messages/count_tokens", messages.count_tokens, name="anthropic-count-tokens"),
    path("v1/models", openai_models.model_list, name="openai-models"),
    path("v1/models/<path:model>", openai_models.model_detail, name="openai-model"),
    # Every other path under /api/ or /v1/: a 404 in the error shape of its door.
    re_path(r"^(?:api|v1)/", handlers.not_found),
    path("admin/", admin.site.urls),
]
