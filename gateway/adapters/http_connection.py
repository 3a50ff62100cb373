"""One kept-alive HTTP/1.1 connection of the gateway's own client (`native_http`): a request
written whole, its answer parsed by httptools as it arrives, and how the connection ended told
apart (before the answer began, mid-answer, or as the end of an answer without a length)."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import httptools
import httpx


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class Closed(Exception):
    """The connection closed before a byte of the answer: maybe stale, maybe refused."""


class Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.sockname: Any = None
        self.closed = False
        self.counted = True  # in the pool's count of open connections, until discarded
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._received = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._headers_done = False
        self._until_close = False  # no length and not chunked: the body ends with the connection

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's: uvloop's or asyncio's
        self.sockname = transport.get_extra_info("sockname")

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # Bytes nobody asked for (after an answer, or while idle): the connection can't be
            # trusted with another request.
            self.close()
            return
        self._received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the provider switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"the answer does not parse: {exc}"))

    def eof_received(self) -> bool:
        return False  # close: a half-closed connection takes no further request

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers_done and self._until_close:
            self._finish(keep_alive=False)
        elif self._received == 0:
            waiter.set_exception(Closed(str(exc) if exc else "the provider closed the connection"))
        else:
            reason = f": {exc}" if exc else ""
            waiter.set_exception(httpx.ReadError(f"the connection closed mid-answer{reason}"))

    # httptools' side

    def on_message_begin(self) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # a second answer to one request: nothing on it can be trusted

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_done = True
        status = self._parser.get_status_code()
        if status >= 200 and status not in (204, 304):
            names = {name.lower() for name, _ in self._headers}
            self._until_close = b"content-length" not in names and (
                b"transfer-encoding" not in names
            )

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() < 200:  # 1xx: the answer itself follows
            self._headers, self._body, self._headers_done = [], [], False
            return
        self._finish(keep_alive=self._parser.should_keep_alive())

    # the pool's side

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._received = 0
        self._headers, self._body = [], []
        self._headers_done = self._until_close = False
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, *, keep_alive: bool) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in self._headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        waiter.set_result(Answer(self._parser.get_status_code(), headers, body, keep_alive))

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()
