"""CORS on the API: django-cors-headers' middleware, passed by for the calls it has nothing to
say to.

A call with no Origin header is a server's (a browser sends one on every cross-origin request,
a preflight included): django-cors-headers would only add `Vary: Origin` to its answer, after a
URL match and a signal per request. That costs the API's busiest callers, servers, ~40 µs a
request for nothing, so they go straight through; every browser call is django-cors-headers'
as it is. The origins it allows are the client apps' (`runtime.wiring`).
"""

from __future__ import annotations

from corsheaders.middleware import CorsMiddleware
from django.http import HttpRequest
from django.http.response import HttpResponseBase


class ApiCorsMiddleware(CorsMiddleware):
    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if "HTTP_ORIGIN" not in request.META:
            response = await self.get_response(request)  # type: ignore[misc]
            return response
        return await super().__acall__(request)
