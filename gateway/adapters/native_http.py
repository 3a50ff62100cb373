"""The gateway's own HTTP/1.1 client for a provider's answer, whole or streamed
(`PROVIDER_HTTP_CLIENT=native`).

Most provider calls are one POST and one whole JSON answer over a kept-alive connection.
aiohttp's client makes a request object, a response object, a task that writes the body and
a stream reader for each of them; here a call is one write (the request's head, made once per
method, URL and headers, with the body) and the answer read by httptools (the C parser uvicorn
itself reads requests with) straight into a list of chunks: about a fifth of aiohttp's CPU a
call (bench/). A stream goes the same way, its body read piece by piece as it comes (`open`);
a call through httpx's API (or a HEAD) goes to httpx's own pool (`NativeTransport`).

What it keeps of the clients before it:
- connections kept alive per origin, at most `limit` open (past it a call waits for one),
  the most recent reused first, an idle one closed after `keepalive_s`; one the server closed
  while idle is never reused;
- it connects only where the outbound URL policy allows: the name resolved, every address
  judged (`allowed_addresses`), then the allowed ones tried in turn; TLS checks the
  certificate against the name;
- failures are httpx's classes, as on the other paths: nothing connects `ConnectError`
  (`ConnectTimeout` within `timeout`), a connection that closes before the answer begins
  `RemoteProtocolError` (retried once on a new connection for an idempotent method only, as
  aiohttp does: a POST may have been acted on), one that closes mid-answer `ReadError`, an
  answer that doesn't parse `RemoteProtocolError`, a header value with a line break
  `LocalProtocolError` (nothing is sent);
- the whole call is the caller's to bound (the adapter's one deadline): a call cancelled
  mid-answer closes its connection, whose late answer would otherwise be read as the next one's.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import socket
import ssl
import time
from collections.abc import Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from gateway.adapters.http_connection import Closed, Connection, Head, Origin
from gateway.adapters.outbound import blocked
from gateway.engine.outbound import OutboundPolicy, allowed_addresses, host_refusal, is_address

# Methods a request may be sent again for, when a kept-alive connection turns out closed before
# a byte of the answer came (RFC 9112, 9.3.1).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
# Heads made per (method, URL, headers): the adapters make a handful, never more than this.
MAX_HEADS = 256
_FORBIDDEN = ("\r", "\n", "\0")


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The system's certificate authorities, loaded once a process and on first use (a
    context holds about a megabyte of them): shared by every pool without a context of its
    own, and never loaded where no provider is reached over TLS."""
    return ssl.create_default_context()


class _Head(NamedTuple):
    origin: Origin
    bytes_: bytes  # the request line and headers, without the length and the blank line
    idempotent: bool


class NativePool:
    """Kept-alive connections to the origins one provider's client calls. `policy`: where it
    may connect (None: anywhere); `ssl_context`: None for `default_tls()`."""

    def __init__(
        self,
        *,
        limit: int,
        keepalive_s: float,
        ssl_context: ssl.SSLContext | None,
        policy: OutboundPolicy | None,
    ) -> None:
        self._limit = max(1, limit)
        self._keepalive_s = keepalive_s
        self._ssl = ssl_context
        self._policy = policy
        self._idle: dict[Origin, collections.deque[Connection]] = {}
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Head] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    async def fetch(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> tuple[int, dict[str, str], bytes, Any]:
        """(status, headers with lower-case names, body as sent, local address) of `method`
        `url` with `headers` and `content`; `timeout` for a new connection."""
        connection, answer = await self._exchange(method, url, headers, content, timeout, False)
        self.finish(connection)
        return answer.status, answer.headers, answer.body, connection.sockname

    async def open(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
    ) -> tuple[Head, Connection]:
        """The status and headers of `method` `url`, and the connection its body is then read
        from (`Connection.read`), to hand back with `finish` however the reading ended."""
        connection, head = await self._exchange(method, url, headers, content, timeout, True)
        return head, connection

    def finish(self, connection: Connection) -> None:
        """A connection back once its answer is taken: kept for the next request if the
        answer was taken to its end and may be followed by another, else closed (a stream
        left midway: the provider stops writing)."""
        if connection.ended and connection.keep_alive and not connection.closed:
            self._release(connection)
        else:
            self._discard(connection)

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
        timeout: float,
        streaming: bool,
    ) -> tuple[Connection, Any]:
        """A connection, the request written on it, and its answer (whole, or a stream's
        head); a kept-alive connection found closed is tried once more for an idempotent
        method."""
        key = (method, url, headers if isinstance(headers, tuple) else tuple(headers))
        head = self._heads.get(key) or self._head(key)
        data = _request_bytes(head.bytes_, content)
        retried = False
        while True:
            connection, reused = await self._connection(head.origin, timeout)
            try:
                if streaming:
                    return connection, await connection.open(data)
                return connection, await connection.send(data)
            except Closed as exc:
                self._discard(connection)
                if reused and head.idempotent and not retried:
                    retried = True
                    continue
                raise httpx.RemoteProtocolError(f"the provider disconnected: {exc}") from None
            except BaseException:
                # Cancelled, timed out or failed mid-answer: what may still arrive is not
                # the next call's.
                self._discard(connection)
                raise

    async def aclose(self) -> None:
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            while idle:
                self._discard(idle.pop())
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(httpx.ConnectError("the client is closed"))

    # heads

    def _head(self, key: tuple[str, str, tuple[tuple[str, str], ...]]) -> _Head:
        """The head of (method, URL, headers), made and kept."""
        method, url, headers = key
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise httpx.UnsupportedProtocol(f"cannot call {scheme or 'a URL without'}://")
        port = parts.port or (443 if scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method} {target} HTTP/1.1"]
        has_host = False
        for name, value in headers:
            if any(c in name or c in value for c in _FORBIDDEN) or ":" in name:
                raise httpx.LocalProtocolError(f"the header {name!r} holds a line break")
            lowered = name.lower()
            if lowered == "content-length":
                continue  # the body's own, added per request
            has_host = has_host or lowered == "host"
            lines.append(f"{name}: {value}")
        if not has_host:
            lines.insert(1, f"Host: {parts.netloc.rsplit('@', 1)[-1]}")
        head = _Head(
            Origin(scheme, parts.hostname, port),
            ("\r\n".join(lines) + "\r\n").encode("latin-1"),
            method.upper() in IDEMPOTENT,
        )
        if len(self._heads) >= MAX_HEADS:
            self._heads.clear()
        self._heads[key] = head
        return head

    # connections

    async def _connection(self, origin: Origin, timeout: float) -> tuple[Connection, bool]:
        while True:
            if self._closed:
                raise httpx.ConnectError("the client is closed")
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                if not connection.closed:
                    return connection, True
                self._discard(connection)  # the provider closed it while it waited
            if self._open < self._limit:
                self._open += 1
                try:
                    return await self._connect(origin, timeout), False
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._wake()  # its turn passes to the next
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self, origin: Origin, timeout: float) -> Connection:
        loop = asyncio.get_running_loop()
        host, port = origin.host, origin.port
        tls = origin.scheme == "https"
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._addresses(host, port)
                failure: OSError | None = None
                for address in addresses:
                    try:
                        _, connection = await loop.create_connection(
                            lambda: Connection(origin),
                            address,
                            port,
                            ssl=(self._ssl or default_tls()) if tls else None,
                            server_hostname=host if tls else None,
                        )
                        return connection
                    except OSError as exc:
                        failure = exc  # the next address may answer
                assert failure is not None
                raise failure
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"no connection to {host}:{port} within {timeout:g} s"
            ) from None
        except (OSError, ssl.CertificateError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None

    async def _addresses(self, host: str, port: int) -> list[str]:
        if self._policy is not None:
            refusal = host_refusal(host, self._policy)
            if refusal:
                raise blocked(refusal)
        if is_address(host):
            return [host]  # judged whole by host_refusal above; nothing to resolve
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if self._policy is None:
            return list(dict.fromkeys(str(info[4][0]) for info in infos))
        addresses, refusal = allowed_addresses(host, infos, self._policy)
        if refusal:
            raise blocked(refusal)
        return addresses

    def _release(self, connection: Connection) -> None:
        if self._closed:
            self._discard(connection)
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, collections.deque()).append(connection)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(
                self._keepalive_s, self._close_expired
            )
        self._wake()

    def _discard(self, connection: Connection) -> None:
        connection.close()
        if connection.counted:
            connection.counted = False
            self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_expired(self) -> None:
        """Idle connections past `keepalive_s` closed (the oldest sit first in each queue);
        again while any is left."""
        self._sweep = None
        oldest = time.monotonic() - self._keepalive_s
        left = False
        for idle in self._idle.values():
            while idle and (idle[0].closed or idle[0].idle_since <= oldest):
                self._discard(idle.popleft())
            left = left or bool(idle)
        if left and not self._closed:
            self._sweep = asyncio.get_running_loop().call_later(
                self._keepalive_s, self._close_expired
            )


def _request_bytes(head: bytes, content: bytes | None) -> bytes:
    if content is None:
        return head + b"\r\n"
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(content), content)
