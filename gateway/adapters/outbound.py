"""The outbound URL policy where a provider call connects (the rules: gateway/engine/outbound.py).

A URL is checked when it is saved, but the name in it may resolve elsewhere by the time it is
called. So every connection pool resolves through the policy and connects only to the addresses
it allowed: the gateway's own (`native_http.NativePool`), httpx's through `PolicyNetworkBackend`
under its own pool, aiohttp's through `aiohttp_transport.PolicyResolver`. A new connection
costs the check; a kept-alive one costs nothing.

A refusal is a `ProviderError` of class `upstream_rejected` ("blocked by the URL policy: …"):
the gateway's configuration, not the client's request, and nothing was sent.
"""

from __future__ import annotations

import asyncio
import socket
import typing

import httpcore
import httpx

from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.engine.outbound import (
    BLOCKED,
    OutboundPolicy,
    allowed_addresses,
    host_refusal,
)
from gateway.engine.secret_destinations import Origin, SecretDestinations, url_origin


def blocked(refusal: str) -> ProviderError:
    return ProviderError(ErrorClass.UPSTREAM_REJECTED, f"{BLOCKED}: {refusal}")


class PolicyNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, resolving first and connecting to an allowed address (the
    TLS handshake still names the host, so its certificate is checked as usual)."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self._policy = policy
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: httpcore.ConnectError | None = None
        for address in await self._allowed_addresses(host, port, timeout):
            try:
                return await self._backend.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc  # the next address may answer, as a resolving connect would try
        assert failure is not None
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)

    async def _allowed_addresses(self, host: str, port: int, timeout: float | None) -> list[str]:
        refusal = host_refusal(host, self._policy)
        if refusal:
            raise blocked(refusal)
        try:
            async with asyncio.timeout(timeout):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"could not resolve {host}: {exc}") from exc
        addresses, refusal = allowed_addresses(host, infos, self._policy)
        if refusal:
            raise blocked(refusal)
        return addresses


class PolicyHTTPTransport(httpx.AsyncHTTPTransport):
    """httpx's own connection pool on `PolicyNetworkBackend`."""

    def __init__(self, *, limits: httpx.Limits, policy: OutboundPolicy) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, limits=limits, trust_env=False)
        # httpx's transport takes no network backend, but the pool it wraps (httpcore's) does:
        # the same pool, rebuilt with one.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PolicyNetworkBackend(policy),
        )


class BlockedTransport(httpx.AsyncBaseTransport):
    """A client whose base URL the policy refuses by its form: every call fails at once."""

    def __init__(self, refusal: str) -> None:
        self.refusal = refusal

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise blocked(self.refusal)

    async def fetch(self, method: str, url: str, host: str, *_: typing.Any) -> typing.NoReturn:
        raise blocked(self.refusal)


class SecretBoundTransport(httpx.AsyncBaseTransport):
    """A provider's pool, sending its key only to a destination the key's variable is bound to
    (`SECRET_DESTINATIONS`: scheme, host and port): checked on each request's own URL, whatever
    the base URL said when the row was saved. A refusal sends nothing (`upstream_rejected`,
    "not sent: …")."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, *, name: str, destinations: SecretDestinations
    ) -> None:
        self._inner = inner
        self._name = name
        self._destinations = destinations
        # Origins already checked: a set lookup a request after the first.
        self._allowed: set[Origin | None] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._check(str(request.url))
        return await self._inner.handle_async_request(request)

    async def fetch(self, method: str, url: str, host: str, *rest: typing.Any) -> typing.Any:
        """The inner transport's `fetch` (`AiohttpTransport`), after the same check."""
        self._check(url)
        return await self._inner.fetch(method, url, host, *rest)  # type: ignore[attr-defined]

    @property
    def fetches(self) -> bool:
        """Whether the inner transport can `fetch`."""
        return hasattr(self._inner, "fetch")

    async def open_stream(self, method: str, url: str, host: str, *rest: typing.Any) -> typing.Any:
        """The inner transport's `open_stream` (`NativeTransport`), after the same check."""
        self._check(url)
        return await self._inner.open_stream(method, url, host, *rest)  # type: ignore[attr-defined]

    @property
    def streams(self) -> bool:
        """Whether the inner transport can `open_stream`."""
        return hasattr(self._inner, "open_stream")

    def _check(self, url: str) -> None:
        origin = url_origin(url)
        if origin not in self._allowed:
            refusal = self._destinations.origin_refusal(self._name, origin)
            if refusal:
                raise ProviderError(ErrorClass.UPSTREAM_REJECTED, f"not sent: {refusal}")
            self._allowed.add(origin)

    async def aclose(self) -> None:
        await self._inner.aclose()
