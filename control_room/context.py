"""The control room's template context on every admin page: the kill-switch banner."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from providers.models import KillSwitch
from providers.selectors import policy_get


def control_room(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if not request.path.startswith("/admin/") or user is None or not user.is_staff:
        return {}
    policy = policy_get()
    if policy.kill_switch == KillSwitch.OFF:
        return {"kill_switch": None}
    return {"kill_switch": policy}
