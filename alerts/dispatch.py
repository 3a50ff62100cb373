"""How the alerts hand work to whoever runs the background jobs, without knowing who that is.

Raising an alert may need a job run later: a delivery, or the failover check after the flap
window. The alerts never import the runtime that runs jobs (a Celery worker, or the serving
process's own threads); the runtime installs its hand-over here when Django starts
(`runtime.apps`). Until one is installed, handing over fails loudly: the event is
already kept in the database, so nothing is lost, and a process that raises alerts without a
runtime is a wiring mistake to see at once.
"""

from __future__ import annotations

from typing import Any, Protocol


class Handoff(Protocol):
    def __call__(
        self, name: str, *args: Any, countdown: float = 0.0, local: bool = False
    ) -> None: ...


# The one-off jobs the alerts hand over, by the names the runtime knows them by.
DELIVER_ALERT = "deliver_alert"
FAILOVER_CHECK = "failover_check"

_handoff: Handoff | None = None


def install(handoff: Handoff) -> None:
    global _handoff
    _handoff = handoff


def hand_over(name: str, *args: Any, countdown: float = 0.0, local: bool = False) -> None:
    """Run the job `name` with `args` in the background, `countdown` seconds from now; `local`
    keeps it in this process even when jobs normally go to Celery."""
    if _handoff is None:
        raise RuntimeError("no background runtime is installed to hand alert jobs to")
    _handoff(name, *args, countdown=countdown, local=local)
