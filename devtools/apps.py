from __future__ import annotations

from django.apps import AppConfig


class DevToolsConfig(AppConfig):
    name = "devtools"
    verbose_name = "Drills and development tools"
