from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class FailoverAdminConfig(AdminConfig):
    """The Django admin, with the control room's site as the default one."""

    default_site = "failover_site.admin_site.FailoverAdminSite"
