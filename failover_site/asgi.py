"""The ASGI application every serving process runs (`uvicorn failover_site.asgi:application`).

Two Django handlers share the process. The frontends' API paths go to a lean handler with no
middleware: Django's session, auth, CSRF and message middleware are sync and would move every
request to a worker thread and back. Everything else (the admin, the probes) gets the full
stack. The lifespan protocol flushes the call ledger and closes provider connections on
shutdown.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")

logger = logging.getLogger(__name__)

# Paths served by the lean handler: the frontends' endpoints.
API_PREFIXES = ("/api/",)


class ApiHandler(ASGIHandler):
    """Django's ASGI handler with an empty middleware chain."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        get_response = (
            self._get_response_async  # type: ignore[attr-defined]
            if is_async
            else self._get_response  # type: ignore[attr-defined]
        )
        self._middleware_chain = convert_exception_to_response(get_response)


django_application = get_asgi_application()
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
        await _lifespan(receive, send)
    else:
        await django_application(scope, receive, send)


async def _lifespan(receive: Any, send: Any) -> None:
    from providers.gateway import get_gateway

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await get_gateway().aclose()
            logger.info("shut down: ledger flushed, provider connections closed")
            await send({"type": "lifespan.shutdown.complete"})
            return
