"""The runtime plugged into the layers that must not import it (called once, at Django's start).

- The alerts hand their one-off jobs (deliveries, the failover check) to the scheduler.
- A committed configuration change moves the config version and marks the snapshot stale.
"""

from __future__ import annotations

from typing import Any

from alerts import dispatch
from failover_site.runtime import gateway, scheduler
from providers.signals import config_committed


def _on_config_committed(**_: Any) -> None:
    gateway.config_changed()


def install() -> None:
    dispatch.install(scheduler.enqueue)
    config_committed.connect(_on_config_committed, weak=False, dispatch_uid="runtime-config")
