"""One pooled HTTP client per provider, reused by every request of this process.

Connections stay open between requests (keep-alive), so a call costs one round trip, not a
handshake. A provider whose configuration changes gets a new client; the old one is closed.
The client never retries on its own: the router decides what follows a failure. It follows no
redirect and connects only where the outbound URL policy (`OUTBOUND_ALLOW`) allows. The
deployment's choices arrive as a `ClientSettings` value; this module reads no settings itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from gateway.adapters import ADAPTERS
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.image_fetch import ImageFetch
from gateway.adapters.outbound import (
    BlockedTransport,
    PolicyHTTPTransport,
    SecretBoundTransport,
)
from gateway.adapters.transport import Fetch, NativeTransport, OpenStream
from gateway.aio import LoopLocal, spawn
from gateway.engine.config import ProviderConfig
from gateway.engine.outbound import OutboundPolicy, url_refusal
from gateway.engine.secret_destinations import Destination, SecretDestinations

logger = logging.getLogger(__name__)

# Enough connections per provider for a busy process; past this, calls queue in the pool.
MAX_CONNECTIONS = 256


def pool_size(config: ProviderConfig) -> int:
    """Connections to one provider in one process: room for every call its in-flight limit
    admits and as many streams past their first token (which gave their place back but still
    read), at least `MAX_CONNECTIONS`. A call queued in the pool would wait unseen by the
    limit, and its latency would be the pool's, not the provider's."""
    return max(MAX_CONNECTIONS, 2 * config.max_in_flight)


@dataclass(frozen=True)
class ClientSettings:
    """How this deployment reaches its providers: the outbound URL policy's names
    (`OUTBOUND_ALLOW`), the HTTP client (`PROVIDER_HTTP_CLIENT`: "native", "aiohttp" or
    "httpx") and where each secret may be sent (`SECRET_DESTINATIONS`,
    `SECRET_DESTINATIONS_LOOPBACK`)."""

    outbound_allow: tuple[str, ...] = ()
    http_client: str = "httpx"
    secret_hosts: Mapping[str, tuple[Destination, ...]] = field(default_factory=dict)
    secret_loopback: bool = False
    image_fetch: ImageFetch = field(default_factory=ImageFetch)  # IMAGE_FETCH_*


def _transport(
    config: ProviderConfig, limits: httpx.Limits, settings: ClientSettings
) -> httpx.AsyncBaseTransport:
    """httpx's own connection pool, aiohttp's under httpx's API, or whole answers and streams on
    the gateway's own connections (PROVIDER_HTTP_CLIENT: httpx, aiohttp, native), held
    to the outbound URL policy (OUTBOUND_ALLOW); a base URL whose form the policy refuses (one
    saved around the model's checks) gets a transport that sends nothing; one with a key, a
    transport that sends it only where its variable may go (SECRET_DESTINATIONS)."""
    refusal = url_refusal(config.base_url)
    if refusal:
        return BlockedTransport(refusal)
    policy = OutboundPolicy.allowing(settings.outbound_allow)
    transport: httpx.AsyncBaseTransport
    if settings.http_client == "native":
        transport = NativeTransport(limits=limits, policy=policy)
    elif settings.http_client == "aiohttp":
        # Only a process that chose aiohttp loads it (75 ms of the start, 7 MiB).
        from gateway.adapters.aiohttp_transport import AiohttpTransport

        transport = AiohttpTransport(limits=limits, policy=policy)
    else:
        transport = PolicyHTTPTransport(limits=limits, policy=policy)
    if not config.api_key:
        return transport
    destinations = SecretDestinations(
        hosts=settings.secret_hosts, loopback=settings.secret_loopback
    )
    return SecretBoundTransport(transport, name=config.api_key_env, destinations=destinations)


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class ProviderClient(httpx.AsyncClient):
    """An httpx client that keeps no cookies: an upstream's Set-Cookie must never ride along
    on the next request (another user's), and skipping the cookie jar saves real time on
    every call. `fetch`: its transport's way to a whole answer without httpx's objects
    (`gateway.adapters.transport`), where it has one."""

    _no_cookies = _NoCookies()
    fetch: Fetch | None = None
    open_stream: OpenStream | None = None

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        return None


def make_client(config: ProviderConfig, settings: ClientSettings) -> httpx.AsyncClient:
    size = pool_size(config)
    limits = httpx.Limits(
        max_connections=size,
        max_keepalive_connections=size,
        keepalive_expiry=30,
    )
    transport = _transport(config, limits, settings)
    client = ProviderClient(
        base_url=config.http_base_url,
        timeout=config.timeout_s,
        limits=limits,
        transport=transport,
        # No proxies or netrc from the environment: a provider is reached the way it's configured.
        trust_env=False,
        follow_redirects=False,
    )
    if getattr(transport, "fetches", True) and hasattr(transport, "fetch"):
        client.fetch = transport.fetch
    if getattr(transport, "streams", True) and hasattr(transport, "open_stream"):
        client.open_stream = transport.open_stream
    return client


def _connection_key(config: ProviderConfig) -> tuple[str, str, str, int]:
    """What a client is bound to. Priority, prices, model or timeout changing keeps it."""
    return (config.kind, config.http_base_url, config.api_key, pool_size(config))


class AdapterPool:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._adapters: LoopLocal[dict[str, ProviderAdapter]] = LoopLocal(dict)
        self._closing: set[asyncio.Task[None]] = set()
        self._replaced: set[httpx.AsyncClient] = set()

    def get(self, config: ProviderConfig) -> ProviderAdapter | None:
        """The adapter for this configuration, made on first use; None for a kind this
        version cannot speak."""
        adapters = self._adapters.get()
        adapter = adapters.get(config.name)
        # The same configuration object on every request of one snapshot: no field by field.
        if adapter is not None and (adapter.config is config or adapter.config == config):
            return adapter
        adapter_class = ADAPTERS.get(config.kind)
        if adapter_class is None:
            return None
        if adapter is not None and _connection_key(adapter.config) == _connection_key(config):
            client = adapter.client  # same endpoint and key: keep its warm connections
        else:
            if adapter is not None:
                self._close_later(adapter)
            client = make_client(config, self.settings)
        adapters[config.name] = adapter_class(config, client, self.settings.image_fetch)
        return adapters[config.name]

    def adapters(self) -> list[ProviderAdapter]:
        adapters = self._adapters.peek()
        return list(adapters.values()) if adapters else []

    def _close_later(self, adapter: ProviderAdapter) -> None:
        """Close a replaced client once the calls already on it have had their time."""

        client = adapter.client
        self._replaced.add(client)

        async def close() -> None:
            await asyncio.sleep(adapter.config.timeout_s + 1)
            await client.aclose()
            self._replaced.discard(client)

        task = spawn(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close this loop's clients (on shutdown)."""
        adapters = self._adapters.peek() or {}
        for task in list(self._closing):
            task.cancel()  # shutting down: the replaced clients close now, with the rest
        await asyncio.gather(*self._closing, return_exceptions=True)
        clients = {id(a.client): a.client for a in adapters.values()}
        clients.update({id(client): client for client in self._replaced})
        await asyncio.gather(*(client.aclose() for client in clients.values()))
        adapters.clear()
        self._replaced.clear()
