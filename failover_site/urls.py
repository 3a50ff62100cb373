from __future__ import annotations

from django.contrib import admin
from django.urls import path

from . import probes

admin.site.site_header = "AI failover gateway"
admin.site.site_title = "AI failover gateway"
admin.site.index_title = "Control room"

urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("admin/", admin.site.urls),
]
