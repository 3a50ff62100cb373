"""One kept-alive HTTP/1.1 connection of the gateway's own client (`native_http`): a request
written whole, its answer parsed by httptools as it arrives, and how the connection ended told
apart (before the answer began, mid-answer, or as the end of an answer without a length).

An answer is taken whole (`send`: the status, headers and body at once) or as a stream
(`open`: the status and headers, then `read` piece by piece as the pieces arrive; past
`STREAM_HIGH_WATER` bytes unread, the connection stops reading until the reader catches up).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, NamedTuple

import httptools
import httpx

# A stream's bytes held unread before the connection stops reading from the provider.
STREAM_HIGH_WATER = 256 * 1024


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes


class Head(NamedTuple):
    status: int
    headers: dict[str, str]


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
        self._waiter: asyncio.Future[Any] | None = None  # the Answer, or a stream's Head
        self._busy = False  # an exchange is under way: its answer's bytes are expected
        self._received = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._headers_done = False
        self._until_close = False  # no length and not chunked: the body ends with the connection
        # A stream's state: its pieces not read yet, how it ended, who waits for the next piece.
        self._streaming = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._ended = False
        self.keep_alive = False
        self._error: Exception | None = None
        self._reader: asyncio.Future[None] | None = None

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's: uvloop's or asyncio's
        self.sockname = transport.get_extra_info("sockname")

    def data_received(self, data: bytes) -> None:
        if not self._busy:
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
        if not self._busy:
            return
        if self._headers_done and self._until_close:
            self._complete(keep_alive=False)
            return
        waiter = self._waiter
        reason = f": {exc}" if exc else ""
        if waiter is not None and not waiter.done():
            if self._received == 0:
                waiter.set_exception(Closed(str(exc) if exc else "the provider closed it"))
            else:
                waiter.set_exception(httpx.ReadError(f"the connection closed mid-answer{reason}"))
        else:
            self._stream_failed(httpx.ReadError(f"the connection closed mid-answer{reason}"))
        self._busy = False

    # httptools' side

    def on_message_begin(self) -> None:
        if not self._busy:
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
        waiter = self._waiter
        if self._streaming and status >= 200 and waiter is not None and not waiter.done():
            waiter.set_result(Head(status, self._header_map()))

    def on_body(self, body: bytes) -> None:
        if not self._streaming:
            self._body.append(body)
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > STREAM_HIGH_WATER and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() < 200:  # 1xx: the answer itself follows
            self._headers, self._body, self._headers_done = [], [], False
            return
        self._complete(keep_alive=self._parser.should_keep_alive())

    # the pool's side

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        """Write a request; the future is its whole answer."""
        return self._start(data, streaming=False)

    def open(self, data: bytes) -> asyncio.Future[Head]:
        """Write a request; the future is its answer's status and headers, its body then
        read with `read`."""
        return self._start(data, streaming=True)

    async def read(self) -> bytes | None:
        """A stream's next piece of body as it came, or None once it has ended; raises what
        broke it off."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._ended:
                return None
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= STREAM_HIGH_WATER // 4 and self.transport:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def ended(self) -> bool:
        """Its answer taken to the end, whole (a stream's read to its last piece)."""
        return self._ended and self._error is None and not self._chunks

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _start(self, data: bytes, *, streaming: bool) -> asyncio.Future[Any]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._busy, self._streaming, self._received = True, streaming, 0
        self._headers, self._body = [], []
        self._headers_done = self._until_close = False
        self._chunks.clear()
        self._buffered, self._ended, self._error, self.keep_alive = 0, False, None, False
        self.transport.write(data)
        return self._waiter

    def _header_map(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for raw_name, raw_value in self._headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return headers

    def _complete(self, *, keep_alive: bool) -> None:
        """The answer has ended: a whole one is handed over, a stream's reader told."""
        self._busy, self._ended, self.keep_alive = False, True, keep_alive
        if self._streaming:
            self._wake_reader()
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        waiter.set_result(Answer(self._parser.get_status_code(), self._header_map(), body))

    def _stream_failed(self, exc: Exception) -> None:
        if self._streaming and not self._ended and self._error is None:
            self._error = exc
            self._wake_reader()

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        else:
            self._stream_failed(exc)
        self._busy = False
        self.close()
