"""The runtime as a Django app: where it plugs itself into the layers that must not know it.

On start it installs the scheduler's hand-over for the alerts' jobs and listens for committed
configuration changes. Celery finds its tasks here too (`runtime.tasks`).
"""

from __future__ import annotations

from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    label = "failover_runtime"
    verbose_name = "Serving runtime"

    def ready(self) -> None:
        # Imported here, not at the top: this module is loaded while Django fills its app
        # registry, before the models the runtime's modules import can be.
        from runtime import wiring

        wiring.install()
