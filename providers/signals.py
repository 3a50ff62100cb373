"""The control plane's one announcement: a change to the configuration has been committed.

Sent after the transaction that made the change commits (`providers.services`), never inside
it, so a rolled-back change announces nothing. The runtime listens (`runtime.apps`):
it moves the config version in the shared state and marks this process's snapshot stale, so
every serving process routes on the change within a second. The control plane itself never
imports the runtime.
"""

from __future__ import annotations

from django.dispatch import Signal

config_committed = Signal()


def config_committed_send() -> None:
    config_committed.send(sender=None)
