"""The two Django ASGI handlers a serving process runs.

`CappedASGIHandler` (the admin, the probes) is Django's own, with the request body capped as it
arrives: Django's reader spools a body of any size to disk before a view can refuse it.
`ApiHandler` (the frontends' endpoints) keeps every request on the event loop.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpResponse, HttpResponseBase
from django.urls import set_script_prefix

from providers.api.common import MAX_BODY_BYTES, error_response
from providers.api.openai_chat import openai_error
from providers.api.validation import ApiError


class BodyTooLarge(Exception):
    pass


def declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


class CappedASGIHandler(ASGIHandler):
    """Django's handler, refusing a body past `body_limit()` with a 413 as soon as it shows."""

    def body_limit(self) -> int:
        return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)

    def too_large(self, scope: dict[str, Any]) -> HttpResponseBase:
        return HttpResponse(
            f"The request body may be at most {self.body_limit()} bytes.\n",
            status=413,
            content_type="text/plain; charset=utf-8",
        )

    async def read_body(self, receive: Any) -> Any:
        limit = self.body_limit()
        body = io.BytesIO()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            body.write(message.get("body", b""))
            if body.tell() > limit:
                raise BodyTooLarge
            if not message.get("more_body", False):
                break
        body.seek(0)
        return body

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            if declared_length(scope) > self.body_limit():
                raise BodyTooLarge
            await self.handle_capped(scope, receive, send)
        except BodyTooLarge:
            await self.send_response(self.too_large(scope), send)

    async def handle_capped(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await super().handle(scope, receive, send)


class ApiHandler(CappedASGIHandler):
    """Django's ASGI handler for the frontends' endpoints, cut to what they need.

    No middleware. And none of the per-request machinery that exists for sync code: Django's
    `handle()` gives every request a thread-sensitive context (a fresh OS thread), sends
    `request_started`/`request_finished` through it (to reset queries and close DB connections)
    and closes the response there too, a dozen thread hops a request. The API's views run no
    ORM code on the event loop (what they need runs through
    `failover_site.runtime.background.run_db`, which releases its own connection), so here a
    request is: read the body, build the request, run the URL resolver and the view, send the
    response. Measured in `bench/`.
    """

    def body_limit(self) -> int:
        return MAX_BODY_BYTES

    def too_large(self, scope: dict[str, Any]) -> HttpResponseBase:
        limit = self.body_limit()
        render = openai_error if scope["path"].startswith("/v1/") else error_response
        return render(ApiError(413, "body_too_large", f"The body may be at most {limit} bytes."))

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

    async def handle_capped(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None  # Django returns one or the other
                response = error_response
            else:
                response = await self.run_get_response(request)
            if response.streaming:
                await self.send_streaming(response, send, receive)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()

    async def send_streaming(self, response: HttpResponseBase, send: Any, receive: Any) -> None:
        """Send a streamed answer until it ends or the client goes away, whichever is first:
        a client that hangs up stops the stream (and its upstream call) at once."""
        sending = asyncio.ensure_future(self.send_response(response, send))
        listening = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({sending, listening}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            listening.cancel()
            if not sending.done():
                sending.cancel()
        try:
            await sending
        except asyncio.CancelledError:
            if not listening.done() or listening.cancelled():
                raise  # this handler itself was cancelled, not the stream


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
