"""The operators' admin site: Django's admin with the control room in it.

The front page is the live status; the control room's pages (thresholds, the static-answer
workbench, charts) sit beside the model pages, under the admin's login and permissions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver

from failover_site.admin_login import ThrottledAdminAuthenticationForm


class FailoverAdminSite(admin.AdminSite):
    site_header = "AI failover gateway"
    site_title = "AI failover gateway"
    index_title = "Control room"
    index_template = "control/index.html"
    # Repeated failed log-ins are refused for a while (failover_site/admin_login.py).
    login_form = ThrottledAdminAuthenticationForm

    def get_urls(self) -> list[URLResolver | URLPattern]:
        # The admin site is made while Django fills its app registry (the admin app's
        # default site), before the control room's models can be imported: its views load
        # when the URLs are first asked for.
        from control_room.urls import control_urls

        return control_urls(self) + super().get_urls()

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        from control_room.status_views import front_page_context  # as get_urls: models

        context = {**front_page_context(request), **(extra_context or {})}
        response = super().index(request, context)
        assert isinstance(response, TemplateResponse)
        return response
