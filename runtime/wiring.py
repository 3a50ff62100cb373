"""The runtime plugged into the layers that must not import it (called once, at Django's start).

- The alerts hand their one-off jobs (deliveries, the failover check) to the scheduler.
- A committed configuration change moves the config version. A process serving requests hands
  its gateway in (`config_changes_to(gateway)`, from the lifespan): the gateway moves the
  version through its own store and rebuilds its snapshot at once. A process serving none (a
  `manage.py` command, a Celery worker) moves the shared version in Redis, where there is one;
  in the embedded mode the serving process sees the change in the database's record of changes.
- CORS (django-cors-headers, on the API's middleware chain) asks which origins may call: those
  some client app allows, or the anonymous widget's, as the serving gateway's current snapshot
  has them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from corsheaders.signals import check_request_enabled
from django.conf import settings
from django.http import HttpRequest

from alerts import dispatch
from providers.signals import config_committed
from runtime import scheduler
from runtime.gateway import Gateway, NotServing, gateway_of

logger = logging.getLogger(__name__)

# The uid of the receiver for a process that serves no requests.
NOT_SERVING_UID = "runtime-config"


def _on_config_committed_not_serving(**_: Any) -> None:
    """The shared version moved for a change made where no gateway serves."""
    if not settings.REDIS_URL:
        return  # embedded: the serving process reads the database's record of changes
    # Imported here: an embedded process never loads Redis's client (its memory, its start-up).
    from gateway.state.resilient_store import REDIS_ERRORS, RedisStore

    store = RedisStore(settings.REDIS_URL)
    try:
        store.bump_config_version()
    except REDIS_ERRORS as exc:
        logger.error(
            "Redis unreachable for the config version (%s): the serving processes see this "
            "change with the next one made while Redis is up",
            exc,
        )
    finally:
        store.close_sync()


@contextmanager
def config_changes_to(gateway: Gateway) -> Iterator[None]:
    """While it lasts, a change committed in this process goes to `gateway` (which moves the
    shared version itself), in place of the not-serving receiver."""

    def receiver(**_: Any) -> None:
        gateway.config_changed()

    uid = f"runtime-config-{id(gateway)}"
    config_committed.disconnect(dispatch_uid=NOT_SERVING_UID)
    config_committed.connect(receiver, weak=False, dispatch_uid=uid)
    try:
        yield
    finally:
        config_committed.disconnect(dispatch_uid=uid)
        _listen_when_not_serving()


def _listen_when_not_serving() -> None:
    if not config_committed.has_listeners():
        config_committed.connect(
            _on_config_committed_not_serving, weak=False, dispatch_uid=NOT_SERVING_UID
        )


def cors_origin_allowed(request: HttpRequest, **_: Any) -> bool:
    """Whether the request's Origin may read the API's answers. In memory, on the loop: the
    snapshot the requests route on (before the process's first snapshot, no origin is)."""
    origin = request.META.get("HTTP_ORIGIN", "").rstrip("/").lower()
    if not origin:
        return False
    try:
        snapshot = gateway_of(request).snapshots.latest()
    except NotServing:
        return False
    return snapshot is not None and origin in snapshot.cors_origins


def install() -> None:
    dispatch.install(scheduler.enqueue)
    _listen_when_not_serving()
    check_request_enabled.connect(cors_origin_allowed, weak=False, dispatch_uid="runtime-cors")
