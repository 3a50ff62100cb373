"""Who may read the live status (every provider's spend, budgets, breakers and incidents): one
rule for the control room's status page and for `GET /api/v1/status` called with an admin
session, so neither shows a staff user what the other refuses them."""

from __future__ import annotations

from typing import Any

# Declared in `FailoverPolicy.Meta.permissions`; a superuser holds it as they hold every one.
STATUS_PERMISSION = "providers.view_status"


def status_viewer(user: Any) -> bool:
    """Whether `user` (a Django user, or the anonymous one) may see the live status: an active
    staff user holding its permission. A database read unless the user's permissions are
    cached on it already (Django's backends cache them per user object)."""
    return bool(
        user.is_authenticated
        and user.is_active
        and user.is_staff
        and user.has_perm(STATUS_PERMISSION)
    )
