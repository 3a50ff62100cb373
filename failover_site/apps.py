from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class FailoverAdminConfig(AdminConfig):
    """The Django admin, with the control room's site as the default one."""

    default_site = "failover_site.admin_site.FailoverAdminSite"


class FailoverSiteConfig(AppConfig):
    """The composition as an app: home of the first-run command (`bootstrap`)."""

    name = "failover_site"
    verbose_name = "Failover platform"
