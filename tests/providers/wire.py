"""What an adapter put on the wire, whichever way a call took: httpx's event hooks see a call
through its client (every call on httpx's own pool, a stream on aiohttp's), spies on its
`fetch` and `open_stream` a whole answer or a stream that skips httpx's client
(`gateway.adapters.transport`)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from gateway.adapters.base import ProviderAdapter
from gateway.adapters.transport import Fetched


class Wire:
    """Each request's headers and JSON body, and the local port each answer came back on (one
    port, one connection)."""

    def __init__(self, adapter: ProviderAdapter) -> None:
        self.headers: list[httpx.Headers] = []
        self.sent: list[Any] = []
        self.local_ports: list[int] = []
        adapter.client.event_hooks = {"request": [self._request], "response": [self._response]}
        open_stream = adapter._open_stream
        if open_stream is not None:

            async def spied_stream(
                method: str,
                url: str,
                host: str,
                headers: Any,
                content: bytes | None,
                timeout: float,
            ) -> httpx.Response:
                self.headers.append(httpx.Headers(list(headers)))
                self.sent.append(json.loads(content) if content else None)
                response = await open_stream(method, url, host, headers, content, timeout)
                await self._response(response)
                return response

            adapter._open_stream = spied_stream
        fetch = adapter._fetch
        if fetch is None:
            return

        async def spied(
            method: str, url: str, host: str, headers: Any, content: bytes | None, timeout: float
        ) -> Fetched:
            self.headers.append(httpx.Headers(list(headers)))
            self.sent.append(json.loads(content) if content else None)
            fetched = await fetch(method, url, host, headers, content, timeout)
            self.local_ports.append(fetched.local_address[1])
            return fetched

        adapter._fetch = spied

    async def _request(self, request: httpx.Request) -> None:
        self.headers.append(request.headers)
        self.sent.append(json.loads(request.content) if request.content else None)

    async def _response(self, response: httpx.Response) -> None:
        stream = response.extensions["network_stream"]
        self.local_ports.append(stream.get_extra_info("client_addr")[1])
