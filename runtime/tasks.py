"""The Celery tasks: thin wrappers that run the jobs of `runtime.jobs` on a worker.

The periodic ones run from beat (`failover_site/celery.py`); each builds a gateway for its run,
runs its async job on a fresh event loop with it (its snapshot read afresh), and releases that
loop's connections when done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from celery import shared_task

from runtime.gateway import Gateway, make_store
from runtime.jobs import PERIODIC
from runtime.scheduler import run_one_off


def run_periodic(job: Callable[[Gateway], Awaitable[Any]]) -> Any:
    async def once() -> Any:
        gateway = Gateway(store=make_store())
        try:
            await gateway.snapshots.refresh()
            return await job(gateway)
        finally:
            await gateway.snapshots.aclose()
            await gateway.adapters.aclose()
            await gateway.store.aclose()

    return asyncio.run(once())


_PERIODIC = {periodic.name: periodic.job for periodic in PERIODIC}


@shared_task(name="failover.sentinel", ignore_result=True)
def sentinel() -> None:
    run_periodic(_PERIODIC["sentinel"])


@shared_task(name="failover.keepalive", ignore_result=True)
def keepalive() -> None:
    run_periodic(_PERIODIC["keepalive"])


@shared_task(name="failover.watchdog", ignore_result=True)
def watchdog() -> None:
    run_periodic(_PERIODIC["watchdog"])


@shared_task(name="failover.housekeeping", ignore_result=True)
def housekeeping() -> None:
    run_periodic(_PERIODIC["housekeeping"])


@shared_task(name="failover.deliver_alert", ignore_result=True)
def deliver_alert(event_id: int) -> None:
    run_one_off("deliver_alert", event_id)


@shared_task(name="failover.failover_check", ignore_result=True)
def failover_check(incident_id: int) -> None:
    run_one_off("failover_check", incident_id)
