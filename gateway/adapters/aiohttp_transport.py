"""aiohttp's connection pool under httpx's API (`PROVIDER_HTTP_CLIENT=aiohttp`): the adapters
speak httpx, the bytes go through aiohttp, whose pool measured several times faster than httpx's
own under concurrency (bench/). Imported only by a process that chose it: aiohttp costs a tenth
of a second and several MiB to load.

Failures are raised as the httpx exceptions they are, so the error table sees the same classes
on either transport: a refused connection is `httpx.ConnectError`, a stalled one a timeout, a
connection dropped mid-answer `httpx.ReadError` (or `RemoteProtocolError`). It connects only
where the outbound URL policy allows: a name through `PolicyResolver` (its connector connects
to what the resolver returned), an IP address in the URL checked by the transport itself.

A whole (not streamed) answer can skip httpx's API altogether: `fetch` sends the request and
reads the answer through the same session, policy and error classes, without the httpx request
and response objects around them (their building and reading measured about a tenth of a
proxied request's time, bench/).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from gateway.adapters.native_http import default_tls
from gateway.adapters.outbound import blocked
from gateway.adapters.transport import Fetched, SocketInfo, decoded
from gateway.engine.outbound import OutboundPolicy, host_refusal, resolved_refusal

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


class PolicyResolver(AbstractResolver):
    """aiohttp's resolver, refusing a name any of whose addresses the policy refuses. (aiohttp
    doesn't resolve an IP address written in the URL: `AiohttpTransport` checks those.)"""

    def __init__(self, policy: OutboundPolicy, resolver: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._resolver = resolver or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        refusal = host_refusal(host, self._policy)
        if refusal:
            raise blocked(refusal)
        results = await self._resolver.resolve(host, port, family)
        refusal = resolved_refusal(host, [result["host"] for result in results], self._policy)
        if refusal:
            raise blocked(refusal)
        return results

    async def close(self) -> None:
        await self._resolver.close()


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
        self._ssl = ssl_context or default_tls()  # the process's one copy
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
            extensions={"http_version": b"HTTP/1.1", "network_stream": SocketInfo(sockname)},
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
        return Fetched(status, answered, decoded(status, answered, body), local_address)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._policy_resolver is not None:
            await self._policy_resolver.close()
            self._policy_resolver = None
