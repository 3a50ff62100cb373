"""The ASGI application every serving process runs (`uvicorn failover_site.asgi:application`).

Two Django handlers share the process (`handlers.py`). The frontends' API paths go to a lean
handler that keeps every request on the event loop; everything else (the admin, the probes)
gets the full stack with its middleware. Both refuse an oversize body as it arrives. The
lifespan protocol builds the process's gateway and hands it in through the lifespan state (the
server copies it into every request's scope), starts the background jobs, and on shutdown stops
them, flushes the call ledger and closes the provider connections.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")
django.setup(set_prefix=False)

# The rest needs Django set up (their modules import models), hence after the call above.
from django.conf import settings  # noqa: E402

from edge.handlers import ApiHandler, CappedASGIHandler  # noqa: E402
from runtime.gateway import STATE_KEY, Gateway, make_store  # noqa: E402
from runtime.incidents import incidents_reconcile  # noqa: E402
from runtime.scheduler import (  # noqa: E402
    InProcessScheduler,
    one_off_jobs_settle,
    serving_process_jobs,
)
from runtime.tracing import tracing_from_env  # noqa: E402
from runtime.wiring import config_changes_to  # noqa: E402

logger = logging.getLogger(__name__)
# The collector's young-generation threshold in a serving process (Python's default: 700).
GC_YOUNG_THRESHOLD = 10_000
# How long a stopping process waits for the alert deliveries its threads are making.
ONE_OFF_SETTLE_S = 5.0

# Paths served by the lean handler: the frontends' endpoints.
API_PREFIXES = ("/api/", "/v1/")
# How long the start-up waits on settling the incidents a stopped process left open: a slow
# database must not keep the process from serving.
RECONCILE_TIMEOUT_S = 10.0


django_application: Any = CappedASGIHandler()
if settings.SERVE_STATIC:
    # Django's own static handler (the one runserver uses): fine for the admin's assets in the
    # embedded mode; production puts a reverse proxy in front of STATIC_ROOT instead.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_application = ASGIStaticFilesHandler(django_application)
api_application = ApiHandler()


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"].startswith(API_PREFIXES):
        await api_application(scope, receive, send)
    elif scope["type"] == "lifespan":
        await _lifespan(scope, receive, send)
    else:
        await django_application(scope, receive, send)


async def _reconcile_incidents(gateway: Gateway) -> None:
    """Before the first request (whose breaker events would otherwise be taken for re-openings
    of incidents nothing follows any more); a failure is logged, never the start-up's."""
    try:
        async with asyncio.timeout(RECONCILE_TIMEOUT_S):
            await incidents_reconcile(gateway.store)
    except Exception:
        logger.exception("the incidents left open could not be settled at start-up")


async def _first_snapshot(gateway: Gateway) -> None:
    """The configuration read before the first request: a CORS preflight (which can't wait for
    the database) then already knows the client apps' origins. A failure is logged; the first
    request tries again."""
    try:
        await gateway.snapshots.current()
    except Exception:
        logger.exception("the configuration could not be read at start-up")


# The lifespan state's absence, as the start-up's failure says it.
NO_STATE = (
    "the ASGI server keeps no lifespan state, which the platform hands its gateway to the "
    "requests in: serve it with uvicorn (or gunicorn with uvicorn workers)"
)


async def _lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    state = scope.get("state")
    message = await receive()
    if message["type"] != "lifespan.startup":
        return
    if state is None:
        await send({"type": "lifespan.startup.failed", "message": NO_STATE})
        return
    gateway = Gateway(store=make_store(), tracing=tracing_from_env())
    state[STATE_KEY] = gateway
    scheduler = InProcessScheduler(gateway, serving_process_jobs())
    with config_changes_to(gateway):
        # Everything loaded so far (Django, the URL conf, the apps) lives as long as the
        # process: keep it out of the collector's full passes, which otherwise walk it
        # every few thousand requests and stall them all for tens of milliseconds.
        gc.freeze()
        # A request leaves no garbage in cycles (checked with gc.DEBUG_SAVEALL), so the young
        # collections only walk the objects of the requests in flight: at 64 concurrent
        # requests, ten thousand of them, a millisecond or more each time, every 700
        # allocations. Past a few thousand they are rare, and a cycle an error leaves still goes
        # within GC_YOUNG_THRESHOLD allocations.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        await _reconcile_incidents(gateway)
        await _first_snapshot(gateway)
        # The background jobs this process runs itself: all of them in the embedded mode,
        # only the watch on the workers' sentinel with Celery.
        scheduler.start()
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown: nothing else comes
        try:
            await scheduler.stop()
            # Alert deliveries in this process's threads get a few seconds to finish.
            await asyncio.to_thread(one_off_jobs_settle, ONE_OFF_SETTLE_S)
            await gateway.aclose()
            logger.info("shut down: ledger flushed, provider connections closed")
        finally:
            await send({"type": "lifespan.shutdown.complete"})
