"""The gateway's provider calls on its own HTTP/1.1 connections (`PROVIDER_HTTP_CLIENT=native`,
the default), under httpx's API: the adapters speak httpx, the bytes go through
`native_http.NativePool`.

A whole answer (`fetch`) and a streamed one (`open_stream`) skip httpx's request and response
objects around the call (their building and reading measured about a tenth of a proxied
request's time, bench/); a call through httpx's API itself (none of the adapters' own) goes
through httpx's pool, made on first use. Failures are raised as the httpx exceptions they are,
so the error table sees the same classes on every pool, and a body sent with a content encoding
is decoded by httpx's own decoders. Connections go only where the outbound URL policy allows
(gateway/adapters/outbound.py).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.adapters.http_connection import Connection
from gateway.adapters.native_http import NativePool
from gateway.adapters.outbound import PolicyHTTPTransport
from gateway.engine.outbound import OutboundPolicy


@dataclass(frozen=True, slots=True)
class Fetched:
    """A whole answer: its status, headers (case-insensitive), body (decoded) and the local
    address of the connection that carried it (as httpx's `network_stream` gives it)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    local_address: Any = None


# `fetch(method, url, host, headers, content, timeout)`, as a client holds it.
Fetch = Callable[
    [str, str, str, Sequence[tuple[str, str]], bytes | None, float], Awaitable[Fetched]
]
# `open_stream(method, url, host, headers, content, timeout)`: a streamed answer, unread.
OpenStream = Callable[
    [str, str, str, Sequence[tuple[str, str]], bytes | None, float], Awaitable[httpx.Response]
]


def decoded(status: int, headers: Mapping[str, str], body: bytes) -> bytes:
    """The body as httpx would read it: a content encoding decoded by its decoders (whose
    failure is httpx's `DecodingError`)."""
    if "content-encoding" not in headers:
        return body
    return httpx.Response(status, headers=list(headers.items()), content=body).read()


class SocketInfo:
    """httpx's `network_stream` response extension, for the one fact callers read from it."""

    def __init__(self, sockname: Any) -> None:
        self._sockname = sockname

    def get_extra_info(self, name: str) -> Any:
        return self._sockname if name == "client_addr" else None


class _NativeBody(httpx.AsyncByteStream):
    def __init__(self, pool: NativePool, connection: Connection) -> None:
        self._pool = pool
        self._connection = connection
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = self._connection.read
        while (chunk := await read()) is not None:
            yield chunk

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._pool.finish(self._connection)


_UTF8 = ("utf-8", "utf8")


class NativeResponse(httpx.Response):
    """An httpx response over a native stream. Its lines are split here, as httpx splits them
    (at "\n", "\r\n" or "\r", without them, the last one flushed at the end), straight from
    the pieces that came, when they need no decoding but UTF-8's; a body with a content
    encoding or another charset goes through httpx's own decoders."""

    async def aiter_lines(self) -> AsyncIterator[str]:
        charset = (self.charset_encoding or "utf-8").lower()
        if "content-encoding" in self.headers or charset not in _UTF8:
            async for line in super().aiter_lines():
                yield line
            return
        if self.is_stream_consumed:
            raise httpx.StreamConsumed()
        if self.is_closed:
            raise httpx.StreamClosed()
        self.is_stream_consumed = True
        assert isinstance(self.stream, httpx.AsyncByteStream)
        pending = b""
        after_cr = False
        async for piece in self.stream:
            if after_cr and piece.startswith(b"\n"):
                piece = piece[1:]  # the "\n" of a "\r\n" cut between two pieces
            data = pending + piece if pending else piece
            if not data:
                continue
            lines = data.splitlines()
            after_cr = data.endswith(b"\r")
            pending = b"" if data.endswith((b"\n", b"\r")) else lines.pop()
            for whole in lines:
                yield whole.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
        await self.aclose()


class NativeTransport(httpx.AsyncBaseTransport):
    """Whole answers (`fetch`) and streams (`open_stream`) on the gateway's own HTTP/1.1
    connections (`gateway.adapters.native_http`). A call through httpx's API, or a HEAD (an
    answer whose length describes no body), goes through httpx's own pool, held to the same
    policy and made on first use; each pool keeps its own connections, within the same limit.
    `policy` None connects anywhere (the benchmark's bare passthrough)."""

    def __init__(
        self,
        *,
        limits: httpx.Limits,
        policy: OutboundPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._limits = limits
        self._policy = policy
        self._native = NativePool(
            limit=limits.max_connections or 0,
            keepalive_s=limits.keepalive_expiry or 15.0,
            ssl_context=ssl_context,
            policy=policy,
        )
        self._httpx: httpx.AsyncBaseTransport | None = None

    def _httpx_pool(self) -> httpx.AsyncBaseTransport:
        if self._httpx is None:
            if self._policy is None:
                self._httpx = httpx.AsyncHTTPTransport(limits=self._limits, trust_env=False)
            else:
                self._httpx = PolicyHTTPTransport(limits=self._limits, policy=self._policy)
        return self._httpx

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._httpx_pool().handle_async_request(request)

    async def fetch(
        self,
        method: str,
        url: str,
        host: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> Fetched:
        """`url` on `host` and its answer read whole, `timeout` for a new connection. The whole
        call is the caller's to bound (the adapter's one deadline, connect to last byte): no
        timer here per read."""
        if method == "HEAD":
            return await self._fetch_head(url, headers, content, timeout)
        status, answered, body, local_address = await self._native.fetch(
            method, url, headers, content, timeout
        )
        return Fetched(status, answered, decoded(status, answered, body), local_address)

    async def _fetch_head(
        self, url: str, headers: Sequence[tuple[str, str]], content: bytes | None, timeout: float
    ) -> Fetched:
        request = httpx.Request(
            "HEAD",
            url,
            headers=list(headers),
            content=content,
            extensions={"timeout": httpx.Timeout(None, connect=timeout).as_dict()},
        )
        response = await self.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        stream = response.extensions.get("network_stream")
        local_address = stream.get_extra_info("client_addr") if stream is not None else None
        return Fetched(response.status_code, response.headers, b"", local_address)

    async def open_stream(
        self,
        method: str,
        url: str,
        host: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> httpx.Response:
        """A streamed answer on the gateway's own connections, as the httpx response the
        adapters read (`NativeResponse`), without httpx's client or aiohttp's request around
        it: its status and headers once they came, its body as it comes. Closing it hands the
        connection back (closed unless read to its end)."""
        head, connection = await self._native.open(method, url, headers, content, timeout)
        return NativeResponse(
            head.status,
            headers=list(head.headers.items()),
            stream=_NativeBody(self._native, connection),
            extensions={
                "http_version": b"HTTP/1.1",
                "network_stream": SocketInfo(connection.sockname),
            },
        )

    async def aclose(self) -> None:
        await self._native.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()
            self._httpx = None
