"""The serving process's event loop: uvloop, with every waiting connection accepted at once.

    uvicorn failover_site.asgi:application --loop failover_site.event_loop:new_event_loop

libuv, under uvloop, accepts one connection per turn of its loop (since libuv 1.45, relying on
the listening socket staying readable). While the loop is busy, a turn takes as long as every
request in flight takes to advance one step: at 64 connections, tens of milliseconds. So a
burst of new connections, each with its request already sent, was let in one turn at a time,
and the last of 64 waited more than a second before the gateway read it, while the requests
it did read were answered in tens of milliseconds (bench/: the p99 at 64 connections). Here a
TCP listener is watched by the loop and accepted from until the kernel has nothing left (at
most `backlog` a turn), as asyncio's own loop does, and each connection is handed to uvloop
(`connect_accepted_socket`), which serves it as it serves any other. A listening socket handed
in (uvicorn's `--workers`, gunicorn) is shared by several processes: there each takes
`SHARED_ACCEPT_PER_TURN` a turn, so a busy worker takes fewer and a burst spreads over the
workers instead of going whole to the one that woke first (measured: two workers' CPU 0.98 and
0.15 cores when each took all it could, 0.82 and 0.75 at four a turn). Unix sockets and an
inherited file descriptor of another family keep uvloop's own server.

Without uvloop (a platform it doesn't build on) this is asyncio's loop, which accepts the same
way already.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger(__name__)

# Connections a worker takes a turn from a listening socket it shares with other workers.
SHARED_ACCEPT_PER_TURN = 4
# A listener that ran out of file descriptors stops accepting for this long (as asyncio's).
ACCEPT_RETRY_DELAY_S = 1.0
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

try:
    import uvloop
except ImportError:  # pragma: no cover - every supported platform builds it
    uvloop = None  # type: ignore[assignment]


class GreedyServer(asyncio.AbstractServer):
    """Listening sockets accepted from until they block; the connections served by `loop`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: list[socket.socket],
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        *,
        per_turn: int,
        ssl: Any,
        ssl_handshake_timeout: float | None,
    ) -> None:
        self._loop = loop
        self._sockets = sockets
        self._protocol_factory = protocol_factory
        self._per_turn = max(1, per_turn)
        self._ssl = ssl
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._serving = False
        self._closed = asyncio.Event()
        self._handing: set[asyncio.Task[Any]] = set()

    # asyncio's Server API (what uvicorn and asyncio.Server's users call)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        if self._serving or self._closed.is_set():
            return
        self._serving = True
        for sock in self._sockets:
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def serve_forever(self) -> None:
        await self.start_serving()
        await self._closed.wait()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._serving = False
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def __aenter__(self) -> GreedyServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()

    # accepting

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(self._per_turn):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing left, or a client gave up while queued
            except OSError as exc:
                if exc.errno not in _OUT_OF_FILES:
                    raise
                # Out of file descriptors: stop listening a while instead of spinning on the
                # readable listener (the waiting connections stay queued in the kernel).
                logger.error("accepting connections paused %gs: %s", ACCEPT_RETRY_DELAY_S, exc)
                self._loop.remove_reader(listener.fileno())
                self._loop.call_later(ACCEPT_RETRY_DELAY_S, self._resume, listener)
                return
            conn.setblocking(False)
            task = self._loop.create_task(self._hand_over(conn))
            self._handing.add(task)
            task.add_done_callback(self._handing.discard)

    def _resume(self, listener: socket.socket) -> None:
        if self._serving and listener.fileno() != -1:
            self._loop.add_reader(listener.fileno(), self._accept, listener)

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._protocol_factory,
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=self._ssl_handshake_timeout if self._ssl else None,
            )
        except Exception:
            logger.debug("a connection ended before it was served", exc_info=True)
            conn.close()


def _listeners(
    host: str | Iterable[str] | None,
    port: int | None,
    *,
    family: int,
    flags: int,
    backlog: int,
    reuse_port: bool,
) -> list[socket.socket]:
    """Bound, listening sockets for `host` (every interface when None) and `port`, as
    asyncio's create_server makes them."""
    hosts: list[str | None] = [host] if host is None or isinstance(host, str) else list(host)
    seen: set[tuple[int, Any]] = set()
    made: list[socket.socket] = []
    try:
        for each in hosts:
            for af, kind, proto, _, address in socket.getaddrinfo(
                each or None, port, family=family, type=socket.SOCK_STREAM, flags=flags
            ):
                if (af, address) in seen:
                    continue
                seen.add((af, address))
                sock = socket.socket(af, kind, proto)
                made.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if af == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
    except BaseException:
        for sock in made:
            sock.close()
        raise
    if not made:
        raise OSError(f"no address to listen on for {host!r}")
    return made


if uvloop is not None:

    class GreedyAcceptLoop(uvloop.Loop):
        """uvloop, with TCP listeners accepted from greedily (`GreedyServer`)."""

        async def create_server(  # type: ignore[override]
            self,
            protocol_factory: Callable[[], asyncio.BaseProtocol],
            host: str | Iterable[str] | None = None,
            port: int | None = None,
            *,
            family: int = socket.AF_UNSPEC,
            flags: int = socket.AI_PASSIVE,
            sock: socket.socket | None = None,
            backlog: int = 100,
            ssl: Any = None,
            reuse_address: bool | None = None,
            reuse_port: bool | None = None,
            ssl_handshake_timeout: float | None = None,
            start_serving: bool = True,
            **rest: Any,
        ) -> asyncio.AbstractServer:
            if sock is not None and sock.family not in (socket.AF_INET, socket.AF_INET6):
                return await super().create_server(
                    protocol_factory,
                    sock=sock,
                    backlog=backlog,
                    ssl=ssl,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    start_serving=start_serving,
                    **rest,
                )
            per_turn = backlog
            if sock is not None:
                sock.listen(backlog)  # as asyncio does with a socket it is given
                sockets = [sock]
                # A socket handed in is usually shared by several workers (uvicorn's
                # --workers, gunicorn): each takes a few a turn, so a worker that is busy
                # takes fewer and the connections spread over the workers.
                per_turn = SHARED_ACCEPT_PER_TURN
            else:
                sockets = _listeners(
                    host,
                    port,
                    family=family,
                    flags=flags,
                    backlog=backlog,
                    reuse_port=bool(reuse_port),
                )
            server = GreedyServer(
                self,
                sockets,
                protocol_factory,
                per_turn=per_turn,
                ssl=ssl,
                ssl_handshake_timeout=ssl_handshake_timeout,
            )
            if start_serving:
                await server.start_serving()
            return server


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop factory uvicorn's `--loop` takes."""
    if uvloop is None:  # pragma: no cover
        return asyncio.new_event_loop()
    return GreedyAcceptLoop()
