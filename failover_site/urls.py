from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path

from providers import api, openai_api

from . import probes

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("api/v1/complete", api.complete, name="api-complete"),
    path("api/v1/status", api.status, name="api-status"),
    re_path(r"^api/", api.not_found),
    path("v1/chat/completions", openai_api.chat_completions, name="openai-chat-completions"),
    path("v1/models", openai_api.models, name="openai-models"),
    re_path(r"^v1/", openai_api.not_found),
    path("admin/", admin.site.urls),
]
