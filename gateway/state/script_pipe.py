"""The one Redis command a request sends, on a connection of its own: EVALSHA of the record
script (`RedisStore.record`), pipelined, the commands of one turn of the event loop in one write.

redis-py's asyncio client spends about a hundred microseconds of the serving process's CPU on
a command (its pool, its retry and observability layers, an argument encoded at a time in
Python), more than the rest of the request's bookkeeping together. Here a command is packed
by hiredis in one call and written at once on one connection per event loop, and replies
(parsed by hiredis) complete the callers' futures in the order they were sent: Redis answers a
connection's commands in order, so concurrent requests share it without waiting on each
other. A caller that gives up (its timeout, its client gone) leaves its place in the queue; the
reply that comes for it is dropped, and the connection serves the calls behind it.

Only a plain TCP URL (`redis://`) is piped; TLS and Unix sockets keep redis-py
(`ScriptPipe.usable`). Failures raise what `resilient_store.REDIS_ERRORS` catches: Redis's own
errors, `OSError`, `TimeoutError`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError


class ScriptPipe:
    """One event loop's pipelined connection for EVALSHA. Connects on first use, and again
    after it was lost."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        options = parse_url(url)
        self.host = options.get("host", "localhost")
        self.port = int(options.get("port", 6379))
        self.db = int(options.get("db", 0) or 0)
        self.username = options.get("username")
        self.password = options.get("password")
        self.timeout_s = timeout_s
        self._wire: Wire | None = None
        self._connecting: asyncio.Future[Wire] | None = None

    @staticmethod
    def usable(url: str) -> bool:
        options = parse_url(url)
        return "connection_class" not in options and "path" not in options

    async def evalsha(self, sha: str, keys: list[str], args: list[Any]) -> Any:
        """The script's reply; a `ResponseError` (NOSCRIPT among them) as Redis gave it."""
        command = ("EVALSHA", sha, len(keys), *keys, *args)
        async with asyncio.timeout(self.timeout_s):
            wire = self._wire
            if wire is None or wire.closed:
                wire = await self._connect()
            try:
                return await wire.send(command)
            except RedisConnectionError:
                # A connection Redis (or something between) closed while it sat idle is only
                # found out by using it: once more on a new one, as redis-py retries.
                return await (await self._connect()).send(command)

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    @property
    def local_address(self) -> str | None:
        """host:port of this end of the open connection (as Redis's CLIENT LIST names it)."""
        wire = self._wire
        if wire is None or wire.closed:
            return None
        host, port = wire.sockname[:2]
        return f"{host}:{port}"

    async def _connect(self) -> Wire:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    def _connected(self, connecting: asyncio.Future[Wire]) -> None:
        self._connecting = None
        if not connecting.cancelled() and connecting.exception() is None:
            self._wire = connecting.result()

    async def _open(self) -> Wire:
        loop = asyncio.get_running_loop()
        _, wire = await loop.create_connection(Wire, self.host, self.port)
        try:
            if self.password is not None:
                credentials = (self.username, self.password) if self.username else (self.password,)
                await wire.send(("AUTH", *credentials))
            if self.db:
                await wire.send(("SELECT", self.db))
        except BaseException:
            wire.close()
            raise
        return wire


class Wire(asyncio.Protocol):
    """One connection: commands written as they come, replies handed out in that order."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reader = hiredis.Reader(encoding="utf-8", replyError=ResponseError)
        self._waiting: deque[asyncio.Future[Any]] = deque()
        # Commands sent in one turn of the event loop, written together at its end.
        self._outgoing: list[bytes] = []

    @property
    def sockname(self) -> tuple[str, int]:
        assert self._transport is not None
        return cast(tuple[str, int], self._transport.get_extra_info("sockname"))

    @property
    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    async def send(self, command: tuple[Any, ...]) -> Any:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RedisConnectionError("Redis connection lost")
        try:
            packed = hiredis.pack_command(command)
        except TypeError as exc:  # what redis-py's encoder refuses too (None, a bool)
            raise DataError(str(exc)) from exc
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiting.append(waiter)
        if not self._outgoing:
            loop.call_soon(self._write)
        self._outgoing.append(packed)
        # A caller cancelled here (its timeout, its client gone) leaves its place in the queue:
        # its reply is dropped when it comes, and the calls behind it keep theirs. Closing the
        # connection would fail them all, and their retries run their commands twice.
        reply = await waiter
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def _write(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(outgoing))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(RedisConnectionError("Redis connection closed"))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        reader, waiting = self._reader, self._waiting
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            if not waiting:
                self.close()  # a reply nobody asked for: out of step
                return
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Redis connection lost: {exc or 'closed by Redis'}"))

    def _fail(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if not waiter.done():
                waiter.set_exception(error)
