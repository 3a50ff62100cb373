"""The two Django ASGI handlers a serving process runs.

`CappedASGIHandler` (the admin, the probes) is Django's own, with the request body capped as it
arrives (Django's reader spools a body of any size to disk before a view can refuse it) and
bound to arrive within `REQUEST_BODY_TIMEOUT_S`. `ApiHandler` (the frontends' endpoints) keeps
every request on the event loop, and caps each body at its endpoint's limit
(`edge.api.arrival.body_limit_for`). What the API answers before or beside its doors (a refusal
on arrival, a path no door serves: `not_found`) is in the error shape of the door whose prefix
the path is under.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import set_script_prefix

from edge.api.anthropic.shapes import anthropic_error
from edge.api.arrival import body_limit_for, body_too_large, error_response
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.openai.errors import openai_error
from edge.api.turned_away import turned_away
from edge.api_middleware import Handler, api_chain, log_answer
from edge.body_deadline import BodyTimedOut, within_deadline
from gateway.engine.tracing import REQUEST
from runtime.gateway import STATE_KEY

# JSON needs no source of anything, and no page may frame it.
API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'"


class BodyTooLarge(Exception):
    pass


def _pages_body_limit() -> int:
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


class CappedASGIHandler(ASGIHandler):
    """Django's handler, refusing a body past `body_limit()` with a 413 as soon as it shows (a
    declared length over it before reading anything), and one still arriving
    `REQUEST_BODY_TIMEOUT_S` after the headers with a 408. Either way the rest of the body is
    never read, so the connection is closed after the answer."""

    def body_limit(self, scope: dict[str, Any]) -> int:
        return _pages_body_limit()

    def too_large(self, scope: dict[str, Any]) -> HttpResponseBase:
        return HttpResponse(
            f"The request body may be at most {self.body_limit(scope)} bytes.\n",
            status=413,
            content_type="text/plain; charset=utf-8",
        )

    def too_slow(self, scope: dict[str, Any]) -> HttpResponseBase:
        return HttpResponse(
            f"The request body must arrive within {settings.REQUEST_BODY_TIMEOUT_S:g} s.\n",
            status=408,
            content_type="text/plain; charset=utf-8",
        )

    async def read_body(self, receive: Any) -> Any:
        # Django's handle() asks with `receive` alone: the pages' cap is one for every path.
        return await self.read_capped(receive, _pages_body_limit())

    async def read_capped(self, receive: Any, limit: int) -> io.BytesIO:
        # One deadline for the whole body, not per chunk: a byte a second never ends otherwise.
        return await within_deadline(
            self._read_capped(receive, limit), timeout_s=settings.REQUEST_BODY_TIMEOUT_S
        )

    async def _read_capped(self, receive: Any, limit: int) -> io.BytesIO:
        # The chunks joined once at the end, into the bytes the file then shares (no copy):
        # a view reading it whole gets that same object, so a body is held once, not twice.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return io.BytesIO(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            if declared_length(scope) > self.body_limit(scope):
                raise BodyTooLarge
            await self.handle_capped(scope, receive, send)
        except BodyTooLarge:
            await self.send_refusal(self.too_large(scope), send)
        except BodyTimedOut:
            await self.send_refusal(self.too_slow(scope), send)

    async def send_refusal(self, response: HttpResponseBase, send: Any) -> None:
        # What is left of the body would be read as the next request: close instead.
        response["Connection"] = "close"
        await self.send_response(response, send)

    async def handle_capped(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await super().handle(scope, receive, send)


class ApiHandler(CappedASGIHandler):
    """Django's ASGI handler for the frontends' endpoints, cut to what they need.

    Only the middleware of `API_MIDDLEWARE` (the security headers), run on the event loop
    (`edge/api_middleware.py`), and none of the per-request machinery that exists for
    sync code: Django's `handle()` sends `request_started`/`request_finished` through a thread
    (to reset queries and close DB connections) and closes the response there too, a dozen
    thread hops a request. The API's views run no ORM code on the event loop (what they need
    runs through `runtime.background.run_db`, which releases its own
    connection), so here a request is: read the body, build the request, run the middleware,
    the URL resolver and the view (`edge/api_middleware.py`), send the response. It takes from
    Django's handler only what reads a body, makes a request and sends a response, and replaces
    none of its internals. Measured in `bench/`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.chain = api_chain(paths=settings.API_MIDDLEWARE, inner=_api_edge, errors=_error_answer)

    def body_limit(self, scope: dict[str, Any]) -> int:
        return body_limit_for(scope["path"])

    def too_large(self, scope: dict[str, Any]) -> HttpResponseBase:
        return self.refusal(scope, body_too_large(scope["path"]))

    def too_slow(self, scope: dict[str, Any]) -> HttpResponseBase:
        timeout = settings.REQUEST_BODY_TIMEOUT_S
        error = ApiError(408, "body_timeout", f"The body must arrive within {timeout:g} s.")
        return self.refusal(scope, error)

    def refusal(self, scope: dict[str, Any], error: ApiError) -> HttpResponseBase:
        """A refusal before the view runs, noted as the doors' own are (`turned_away`), from a
        request made of the scope alone (no body)."""
        request, _ = self.create_request(scope, io.BytesIO())
        if request is not None:
            turned_away(request, error)
        return _render_for(scope["path"])(error)

    async def send_refusal(self, response: HttpResponseBase, send: Any) -> None:
        # Refused before the middleware runs: the headers it would have added.
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = API_CONTENT_SECURITY_POLICY
        await super().send_refusal(response, send)

    async def handle_capped(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        state = scope.get("state")
        gateway = state.get(STATE_KEY) if state else None
        tracing = gateway.tracing if gateway is not None else None
        if tracing is None:
            await self.answer(scope, receive, send)
            return
        # The request's span: its provider calls' spans go under it (`gateway.engine.tracing`).
        span = tracing.request(scope)
        token = REQUEST.set(span)
        status = 500
        try:
            status = await self.answer(scope, receive, send)
        finally:
            REQUEST.reset(token)
            span.ended(status)

    async def answer(self, scope: dict[str, Any], receive: Any, send: Any) -> int:
        """Read the body, answer the request; the answer's status (0: the client left)."""
        try:
            body_file = await self.read_capped(receive, self.body_limit(scope))
        except RequestAborted:
            return 0
        request: HttpRequest | None = None
        try:
            set_script_prefix(settings.FORCE_SCRIPT_NAME or scope.get("root_path", "") or "")
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None  # Django returns one or the other
                response = error_response
            else:
                response = await self.chain(request)
                log_answer(request, response)
            if response.streaming:
                await self.send_streaming(response, send, receive)
            else:
                await self.send_response(response, send)
            return response.status_code
        finally:
            if request is not None:
                request.close()
            body_file.close()

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        """A whole answer as Django sends one, in two messages (the body in one piece, not
        cut into 64 KiB chunks: the server cuts what it writes), its headers encoded once. A
        stream, or an answer a middleware gave a cookie, goes through Django's own."""
        if not isinstance(response, HttpResponse) or response.cookies:
            await super().send_response(response, send)
            return
        content = response.content
        headers = [
            (name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()
        ]
        if not response.has_header("Content-Length"):
            # Its length, not chunks: one frame fewer to write and to read, and a client or
            # proxy knows the end of the answer without parsing chunk sizes.
            headers.append((b"content-length", b"%d" % len(content)))
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": content})

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


def _render_for(path: str) -> Callable[[ApiError], JsonAnswer]:
    """The door's error shape: Anthropic's on /v1/messages and under it, OpenAI's on the rest
    of /v1/, the gateway's own on /api/."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic_error
    return openai_error if path.startswith("/v1/") else error_response


async def not_found(request: HttpRequest) -> JsonAnswer:
    """A path under /api/ or /v1/ that no door serves (`failover_site/urls.py` sends each one
    here): a 404 in the error shape of the door whose prefix it is under."""
    error = ApiError(404, "not_found", f"No endpoint at {request.path}.")
    return _render_for(request.path)(error)


def _error_answer(request: HttpRequest, status: int, code: str, message: str) -> JsonAnswer:
    return _render_for(request.path)(ApiError(status, code, message))


def _api_edge(view: Handler) -> Handler:
    """Innermost, so the middleware's headers (and CORS's) reach its answers too: the refusal
    of plain HTTP when `API_REQUIRE_HTTPS` is on, and the API's Content-Security-Policy."""
    require_https = settings.API_REQUIRE_HTTPS

    async def edge(request: HttpRequest) -> HttpResponseBase:
        if require_https and not request.is_secure():
            error = ApiError(403, "https_required", "This API answers over HTTPS only.")
            turned_away(request, error)
            response: HttpResponseBase = _render_for(request.path)(error)
        else:
            response = await view(request)
        response.headers.setdefault("Content-Security-Policy", API_CONTENT_SECURITY_POLICY)
        return response

    return edge
