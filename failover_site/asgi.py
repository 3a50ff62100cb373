"""The ASGI application every serving process runs (`uvicorn failover_site.asgi:application`).

Two Django handlers share the process. The frontends' API paths go to a lean handler (below)
that keeps every request on the event loop; everything else (the admin, the probes) gets the
full stack with its middleware. The lifespan protocol flushes the call ledger and closes the
provider connections on shutdown.
"""

from __future__ import annotations

import gc
import io
import logging
import os
from typing import Any

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")

logger = logging.getLogger(__name__)

# Paths served by the lean handler: the frontends' endpoints.
API_PREFIXES = ("/api/",)


class ApiHandler(ASGIHandler):
    """Django's ASGI handler for the frontends' endpoints, cut to what they need.

    No middleware. And none of the per-request machinery that exists for sync code: Django's
    `handle()` gives every request a thread-sensitive context (a fresh OS thread), sends
    `request_started`/`request_finished` through it (to reset queries and close DB connections)
    and closes the response there too, a dozen thread hops a request. The API's views run no
    ORM code on the event loop (what they need runs through `providers.background.run_db`,
    which releases its own connection), so here a request is: read the body, build the
    request, run the URL resolver and the view, send the response. Measured in `bench/`.
    """

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

    async def read_body(self, receive: Any) -> Any:
        """The body, refused past the API's limit as it arrives: Django's own reader would
        spool any size to disk before a view could say no."""
        limit = _max_body_bytes()
        body = io.BytesIO()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            body.write(message.get("body", b""))
            if body.tell() > limit:
                raise _BodyTooLarge
            if not message.get("more_body", False):
                break
        body.seek(0)
        return body

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            if _declared_length(scope) > _max_body_bytes():
                raise _BodyTooLarge
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        except _BodyTooLarge:
            await self.send_response(_body_too_large(), send)
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None  # Django returns one or the other
                response = error_response
            else:
                response = await self.run_get_response(request)
            await self.send_response(response, send)
        finally:
            body_file.close()


class _BodyTooLarge(Exception):
    pass


def _max_body_bytes() -> int:
    from providers.api import MAX_BODY_BYTES

    return MAX_BODY_BYTES


def _declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def _body_too_large() -> Any:
    from providers.api import error_response
    from providers.validation import ApiError

    limit = _max_body_bytes()
    return error_response(
        ApiError(413, "body_too_large", f"The body may be at most {limit} bytes.")
    )


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
            # Everything loaded so far (Django, the URL conf, the apps) lives as long as the
            # process: keep it out of the collector's full passes, which otherwise walk it
            # every few thousand requests and stall them all for tens of milliseconds.
            gc.freeze()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await get_gateway().aclose()
                logger.info("shut down: ledger flushed, provider connections closed")
            finally:
                await send({"type": "lifespan.shutdown.complete"})
            return
