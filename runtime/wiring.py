"""The runtime plugged into the layers that must not import it (called once, at Django's start).

- The alerts hand their one-off jobs (deliveries, the failover check) to the scheduler.
- A committed configuration change moves the config version and marks the snapshot stale.
- CORS (django-cors-headers, on the API's middleware chain) asks which origins may call: those
  some client app allows, or the anonymous widget's, as the current snapshot has them.
"""

from __future__ import annotations

from typing import Any

from corsheaders.signals import check_request_enabled
from django.http import HttpRequest

from alerts import dispatch
from providers.signals import config_committed
from runtime import gateway, scheduler


def _on_config_committed(**_: Any) -> None:
    gateway.config_changed()


def cors_origin_allowed(request: HttpRequest, **_: Any) -> bool:
    """Whether the request's Origin may read the API's answers. In memory, on the loop: the
    snapshot the requests route on (before the process's first snapshot, no origin is)."""
    origin = request.META.get("HTTP_ORIGIN", "").rstrip("/").lower()
    snapshot = gateway.get_gateway().snapshots.latest()
    return bool(origin) and snapshot is not None and origin in snapshot.cors_origins


def install() -> None:
    dispatch.install(scheduler.enqueue)
    config_committed.connect(_on_config_committed, weak=False, dispatch_uid="runtime-config")
    check_request_enabled.connect(cors_origin_allowed, weak=False, dispatch_uid="runtime-cors")
