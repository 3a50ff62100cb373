"""The outbound URL policy where an alert channel connects.

A channel's URL is checked when it is saved (and when the channel is built to send), but the
name in it may resolve elsewhere by the time it is called. The channels' one HTTP call site
uses `policy_transport()`: httpx's pool on a network backend that resolves the name itself and
connects only to addresses the policy allows (the TLS handshake still names the host). A
refusal raises `OutboundRefused` before anything is sent.
"""

from __future__ import annotations

import typing

import httpcore
import httpx

from providers.models.outbound import OutboundPolicy, outbound_policy, resolve_allowed


class PolicyNetworkBackend(httpcore.NetworkBackend):
    def __init__(self, policy: OutboundPolicy) -> None:
        self._policy = policy
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = resolve_allowed(host, port, self._policy)
        except OSError as exc:
            raise httpcore.ConnectError(f"could not resolve {host}: {exc}") from exc
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return self._backend.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc  # the next address may answer, as a resolving connect would try
        assert failure is not None
        raise failure

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class PolicyHTTPTransport(httpx.HTTPTransport):
    """httpx's own transport, connecting through `PolicyNetworkBackend`."""

    def __init__(self, policy: OutboundPolicy) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx's transport takes no network backend, but the pool it wraps (httpcore's) does:
        # the same pool, rebuilt with one.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            network_backend=PolicyNetworkBackend(policy),
        )


def policy_transport() -> httpx.HTTPTransport:
    """A transport held to the policy in force (`OUTBOUND_ALLOW`)."""
    return PolicyHTTPTransport(outbound_policy())
