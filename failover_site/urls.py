from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path

from failover_site import metrics_scrape, probes
from providers.api import complete, openai_chat, openapi, status

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", metrics_scrape.metrics, name="metrics"),
    path("api/v1/complete", complete.complete, name="api-complete"),
    path("api/v1/status", status.status, name="api-status"),
    path("api/openapi.json", openapi.openapi_json, name="api-openapi"),
    re_path(r"^api/", complete.not_found),
    path("v1/chat/completions", openai_chat.chat_completions, name="openai-chat-completions"),
    path("v1/models", openai_chat.models, name="openai-models"),
    re_path(r"^v1/", openai_chat.not_found),
    path("admin/", admin.site.urls),
]
