"""aiohttp's connection pool under httpx's API: the adapters speak httpx, the bytes go through
aiohttp, whose pool measured several times faster than httpx's own under concurrency (bench/).

Failures are raised as the httpx exceptions they are, so the error table sees the same classes
on either transport: a refused connection is `httpx.ConnectError`, a stalled one a timeout, a
connection dropped mid-answer `httpx.ReadError` (or `RemoteProtocolError`). With a policy, it
connects only where the outbound URL policy allows (gateway/adapters/outbound.py).

A whole (not streamed) answer can skip httpx's API altogether: `fetch` sends the request and
reads the answer through the same session, policy and error classes, without the httpx request
and response objects around them (their building and reading measured about a tenth of a
proxied request's time, bench/). A body sent with a content encoding is decoded by httpx's own
decoders, as on the other path.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx

from gateway.adapters.http_connection import Connection
from gateway.adapters.native_http import NativePool
from gateway.adapters.outbound import PolicyResolver, blocked
from gateway.engine.outbound import OutboundPolicy, host_refusal

# aiohttp's own classes, most specific first: the first that matches decides.
_ERRORS: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),  # refused, DNS, TLS handshake
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.ClientOSError, httpx.ReadError),
    (aiohttp.ClientConnectionError, httpx.ReadError),
    (aiohttp.ClientError, httpx.TransportError),
)


def _as_httpx(exc: BaseException, request: httpx.Request | None) -> httpx.TransportError:
    if isinstance(exc, asyncio.TimeoutError):
        return httpx.ReadTimeout(f"timed out: {exc}", request=request)
    for aiohttp_class, httpx_class in _ERRORS:
        if isinstance(exc, aiohttp_class):
            return httpx_class(f"{type(exc).__name__}: {exc}", request=request)
    return httpx.TransportError(f"{type(exc).__name__}: {exc}", request=request)


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


def _decoded(status: int, headers: Mapping[str, str], body: bytes) -> bytes:
    """The body as httpx would read it: a content encoding decoded by its decoders (whose
    failure is httpx's `DecodingError`)."""
    if "content-encoding" not in headers:
        return body
    return httpx.Response(status, headers=list(headers.items()), content=body).read()


def _local_address(response: aiohttp.ClientResponse) -> Any:
    """The local address of the connection that carried `response`. A small answer may already
    be read and its connection back in the pool: the protocol still knows which socket it was."""
    protocol = getattr(response, "_protocol", None)
    transport = getattr(protocol, "transport", None)
    return transport.get_extra_info("sockname") if transport is not None else None


@functools.lru_cache(maxsize=64)
def _connect_within(timeout: float) -> aiohttp.ClientTimeout:
    """A connection within `timeout`, and no other limit (one per providers' timeout)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=timeout)


class _SocketInfo:
    """httpx's `network_stream` response extension, for the one fact callers read from it."""

    def __init__(self, sockname: Any) -> None:
        self._sockname = sockname

    def get_extra_info(self, name: str) -> Any:
        return self._sockname if name == "client_addr" else None


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """`policy`: where it may connect (the pool always gives one; None connects anywhere, as
    the benchmark's bare passthrough does)."""

    def __init__(
        self,
        *,
        limits: httpx.Limits,
        policy: OutboundPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._limits = limits
        self._policy = policy
        self._ssl = ssl_context or ssl.create_default_context()
        self._session: aiohttp.ClientSession | None = None
        self._hosts_allowed: set[str] = set()
        self._policy_resolver: PolicyResolver | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                keepalive_timeout=self._limits.keepalive_expiry or 15.0,
                ssl=self._ssl,
                resolver=self._resolver(),
            )
            # httpx decodes content-encoding itself and sets its own headers.
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
                trust_env=False,
            )
        return self._session

    def _resolver(self) -> PolicyResolver | None:
        # Made on the loop that uses it (aiohttp's resolver binds to the running loop); the
        # connector doesn't close a resolver it was given, so `aclose` does.
        if self._policy is not None and self._policy_resolver is None:
            self._policy_resolver = PolicyResolver(self._policy)
        return self._policy_resolver

    def _check_host(self, host: str) -> None:
        """aiohttp connects to an IP address in the URL without asking the resolver: the
        policy judges it here, once per host (a name is judged by `PolicyResolver`)."""
        if self._policy is None or host in self._hosts_allowed:
            return
        refusal = host_refusal(host, self._policy)
        if refusal:
            raise blocked(refusal)
        self._hosts_allowed.add(host)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._check_host(request.url.host)
        timeouts = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        try:
            response = await self._get_session().request(
                request.method,
                str(request.url),
                headers=headers,
                data=request.content or None,
                allow_redirects=False,
                compress=None,
                timeout=timeout,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, request) from exc
        sockname = _local_address(response)
        return httpx.Response(
            status_code=response.status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            stream=_ResponseStream(response, request),
            extensions={"http_version": b"HTTP/1.1", "network_stream": _SocketInfo(sockname)},
            request=request,
        )

    async def fetch(
        self,
        method: str,
        url: str,
        host: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> Fetched:
        """`handle_async_request` and the answer's read, without httpx's objects: `url` on
        `host`, `timeout` for a new connection. The whole call is the caller's to bound (the
        adapter's one deadline, connect to last byte): no timer here per read."""
        self._check_host(host)
        try:
            async with self._get_session().request(
                method,
                url,
                headers=headers,
                data=content,
                allow_redirects=False,
                compress=None,
                timeout=_connect_within(timeout),
            ) as response:
                local_address = _local_address(response)
                body = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx(exc, None) from exc
        status, answered = response.status, response.headers
        return Fetched(status, answered, _decoded(status, answered, body), local_address)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._policy_resolver is not None:
            await self._policy_resolver.close()
            self._policy_resolver = None


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


class NativeTransport(AiohttpTransport):
    """`AiohttpTransport` with its whole answers (`fetch`) and its streams (`open_stream`) on
    the gateway's own HTTP/1.1 connections (`gateway.adapters.native_http`): a call through
    httpx's API still goes through aiohttp's pool. Each pool keeps its own connections,
    within the same limit."""

    def __init__(
        self,
        *,
        limits: httpx.Limits,
        policy: OutboundPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(limits=limits, policy=policy, ssl_context=ssl_context)
        self._native = NativePool(
            limit=limits.max_connections or 0,
            keepalive_s=limits.keepalive_expiry or 15.0,
            ssl_context=self._ssl,
            policy=policy,
        )

    async def fetch(
        self,
        method: str,
        url: str,
        host: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> Fetched:
        if method == "HEAD":  # an answer whose length describes no body: aiohttp's to read
            return await super().fetch(method, url, host, headers, content, timeout)
        status, answered, body, local_address = await self._native.fetch(
            method, url, headers, content, timeout
        )
        return Fetched(status, answered, _decoded(status, answered, body), local_address)

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
                "network_stream": _SocketInfo(connection.sockname),
            },
        )

    async def aclose(self) -> None:
        await self._native.aclose()
        await super().aclose()
