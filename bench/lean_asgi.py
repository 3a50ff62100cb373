"""EXPERIMENT, not the shipped engine: the gateway with the API paths served without Django's
per-request ASGI machinery, to measure what that machinery costs (`--targets lean`).

Django's `ASGIHandler.__call__` wraps every request in `ThreadSensitiveContext` (asgiref then
makes a one-thread executor, i.e. a new OS thread, for that request), sends `request_started`
and `request_finished` (their receivers, `reset_queries` and `close_old_connections`, are sync:
each send is a hop to that thread and back), runs the view in a second task beside a
disconnect listener, and closes the response in the thread. The API views run no SQL on the
event loop (the ledger and snapshot use `run_db`, which closes its own connection), so here they
are called directly: read the body, build the request, run the URL resolver + view through the
(empty) middleware chain, send the response. Everything after that — the view, the router, the
adapters, the ledger — is the engine's own code, unchanged.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestAborted

from failover_site.asgi import API_PREFIXES, ApiHandler, _lifespan, django_application


class LeanApiHandler(ApiHandler):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None
                response = error_response
            else:
                response = await self.run_get_response(request)
            await self.send_response(response, send)
        finally:
            body_file.close()


lean_api = LeanApiHandler()


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"].startswith(API_PREFIXES):
        await lean_api(scope, receive, send)
    elif scope["type"] == "lifespan":
        await _lifespan(receive, send)
    else:
        await django_application(scope, receive, send)
