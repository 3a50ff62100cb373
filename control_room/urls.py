"""The control room's URLs, under the admin site (its login, its permissions, its CSRF)."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.urls import URLPattern

from control_room import (
    charts_views,
    policy_views,
    refusal_views,
    report_views,
    roi_views,
    static_views,
    status_views,
)


def control_urls(site: AdminSite) -> list[URLPattern]:
    patterns: list[URLPattern] = []
    for module in (
        status_views,
        policy_views,
        static_views,
        charts_views,
        roi_views,
        report_views,
        refusal_views,
    ):
        patterns += module.urls(site)
    return patterns
