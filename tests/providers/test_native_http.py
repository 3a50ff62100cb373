"""The gateway's own HTTP/1.1 client (`gateway.adapters.native_http`) against a server on
loopback that answers as a test scripts it, byte for byte: the shapes of answer a provider or
a proxy in front of one may send, and the ways a connection ends. (Answers and faults through
the adapters, on every pool, are in test_adapters.py against the fake provider.)"""

from __future__ import annotations

import asyncio
import gzip
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from gateway.adapters.errors import ProviderError
from gateway.adapters.native_http import NativePool
from gateway.adapters.transport import NativeResponse, NativeTransport
from gateway.engine.outbound import OutboundPolicy

pytestmark = pytest.mark.backend_free

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
HEADERS = (("Host", "provider.test"), ("Content-Type", "application/json"))
# How long a test waits for something that happens at once: a bound, not a measurement.
WITHIN_S = 5.0

Script = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, head and body (by its Content-Length); b"" when the client went away."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return b""
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


class Server:
    """A loopback server running `script(server, reader, writer, connection_number)` on each
    connection; it counts connections and keeps every request it read."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/api/chat"
        return self

    async def read(self, reader: asyncio.StreamReader) -> bytes:
        request = await read_request(reader)
        if request:
            self.requests.append(request)
        return request

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.script(self, reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()
            self.closed.set()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()


def answering(*answers: bytes) -> Script:
    """Each request on a connection answered with the next of `answers` (the last repeats)."""

    async def script(
        server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
    ) -> None:
        served = 0
        while await server.read(reader):
            writer.write(answers[min(served, len(answers) - 1)])
            await writer.drain()
            served += 1

    return script


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    started: list[Server] = []

    async def start(script: Script, tls: ssl.SSLContext | None = None) -> Server:
        server = await Server(script, tls).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


@pytest.fixture
async def pool() -> AsyncIterator[NativePool]:
    made = NativePool(
        limit=8,
        keepalive_s=30,
        ssl_context=None,
        policy=OutboundPolicy.allowing(("loopback",)),
    )
    yield made
    await made.aclose()


async def post(pool: NativePool, server: Server, body: bytes = b'{"q":1}') -> tuple[int, bytes]:
    status, _, answer, _ = await pool.fetch("POST", server.url, HEADERS, body, WITHIN_S)
    return status, answer


class TestKeptAlive:
    async def test_calls_one_after_another_share_one_connection(self, serve, pool):
        server = await serve(answering(OK))

        for _ in range(3):
            assert await post(pool, server) == (200, b'{"ok":true}')

        assert server.connections == 1
        assert len(server.requests) == 3

    async def test_the_request_carries_its_headers_and_its_bodys_length_once(self, serve, pool):
        server = await serve(answering(OK))

        await post(pool, server, b'{"prompt":"hi"}')

        head, _, body = server.requests[0].partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /api/chat HTTP/1.1"
        assert b"Host: provider.test" in lines
        assert [line for line in lines if line.lower().startswith(b"content-length")] == [
            b"Content-Length: 15"
        ]
        assert body == b'{"prompt":"hi"}'

    async def test_an_answer_that_says_close_is_not_reused(self, serve, pool):
        closing = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
        server = await serve(answering(closing))

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert await post(pool, server) == (200, b'{"ok":true}')

        assert server.connections == 2
        assert pool.open_connections <= 1

    async def test_a_connection_the_provider_closed_while_idle_is_not_reused(self, serve, pool):
        async def once_then_close(server, reader, writer, _):
            await server.read(reader)
            writer.write(OK)
            await writer.drain()

        server = await serve(once_then_close)
        await post(pool, server)
        await asyncio.wait_for(server.closed.wait(), WITHIN_S)
        await asyncio.sleep(0)  # the close reaches the client's protocol on the next turn

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert server.connections == 2

    async def test_an_idle_connection_is_closed_after_its_keepalive(self, serve):
        server = await serve(answering(OK))
        short = NativePool(
            limit=8, keepalive_s=0.05, ssl_context=ssl.create_default_context(), policy=None
        )
        try:
            await post(short, server)
            await asyncio.wait_for(server.closed.wait(), WITHIN_S)
            assert short.open_connections == 0
        finally:
            await short.aclose()


class TestAnswerShapes:
    async def test_a_chunked_answer_is_read_whole(self, serve, pool):
        chunked = (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"ok"\r\n6\r\n:true}\r\n0\r\n\r\n'
        )
        server = await serve(answering(chunked))

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert await post(pool, server) == (200, b'{"ok":true}')
        assert server.connections == 1

    async def test_an_answer_without_a_length_ends_with_its_connection(self, serve, pool):
        async def until_close(server, reader, writer, _):
            await server.read(reader)
            writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"ok":')
            await writer.drain()
            writer.write(b"true}")
            await writer.drain()
            writer.close()

        server = await serve(until_close)

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert pool.open_connections == 0

    async def test_an_early_hint_before_the_answer_is_passed_over(self, serve, pool):
        server = await serve(answering(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK))

        status, headers, body, _ = await pool.fetch("POST", server.url, HEADERS, b"{}", WITHIN_S)

        assert (status, body) == (200, b'{"ok":true}')
        assert "link" not in headers

    async def test_headers_come_with_lower_case_names_and_repeats_joined(self, serve, pool):
        answer = (
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nX-Note: a\r\nX-Note: b\r\n"
            b"Content-Length: 2\r\n\r\n{}"
        )
        server = await serve(answering(answer))

        status, headers, body, local = await pool.fetch(
            "POST", server.url, HEADERS, b"{}", WITHIN_S
        )

        assert (status, body) == (429, b"{}")
        assert headers["retry-after"] == "7"
        assert headers["x-note"] == "a, b"
        assert local[0] == "127.0.0.1"

    async def test_bytes_past_the_answer_keep_the_connection_from_reuse(self, serve, pool):
        server = await serve(answering(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert await post(pool, server) == (200, b'{"ok":true}')

        assert server.connections == 2


class TestFailures:
    async def test_nothing_listening_is_a_connect_error(self, pool):
        server = await Server(answering(OK)).start()
        await server.stop()
        await asyncio.sleep(0)

        with pytest.raises(httpx.ConnectError):
            await post(pool, server)
        assert pool.open_connections == 0

    async def test_a_post_whose_connection_closes_unanswered_is_not_sent_again(self, serve, pool):
        async def answer_once_then_drop(server, reader, writer, number):
            if number == 1:
                await server.read(reader)
                writer.write(OK)
                await writer.drain()
            await server.read(reader)  # the next request, read and never answered

        server = await serve(answer_once_then_drop)
        await post(pool, server)

        with pytest.raises(httpx.RemoteProtocolError):
            await post(pool, server)
        assert len(server.requests) == 2  # sent once: a POST may have been acted on

    async def test_a_get_on_a_connection_found_closed_is_sent_once_more(self, serve, pool):
        async def answer_once_then_drop(server, reader, writer, number):
            if number == 1:
                await server.read(reader)
                writer.write(OK)
                await writer.drain()
                await server.read(reader)  # the second request: dropped unanswered
                return
            while await server.read(reader):
                writer.write(OK)
                await writer.drain()

        server = await serve(answer_once_then_drop)
        await pool.fetch("GET", server.url, HEADERS, None, WITHIN_S)

        status, _, body, _ = await pool.fetch("GET", server.url, HEADERS, None, WITHIN_S)

        assert (status, body) == (200, b'{"ok":true}')
        assert server.connections == 2

    async def test_a_connection_that_closes_mid_answer_is_a_read_error(self, serve, pool):
        async def half(server, reader, writer, _):
            await server.read(reader)
            writer.write(OK[:-4])
            await writer.drain()

        server = await serve(half)

        with pytest.raises(httpx.ReadError):
            await post(pool, server)
        assert pool.open_connections == 0

    async def test_an_answer_that_is_not_http_is_a_protocol_error(self, serve, pool):
        server = await serve(answering(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"))

        with pytest.raises(httpx.RemoteProtocolError):
            await post(pool, server)
        assert pool.open_connections == 0

    async def test_a_header_with_a_line_break_sends_nothing(self, serve, pool):
        server = await serve(answering(OK))
        smuggled = (("Host", "provider.test"), ("Authorization", "Bearer k\r\nX-Evil: 1"))

        with pytest.raises(httpx.LocalProtocolError):
            await pool.fetch("POST", server.url, smuggled, b"{}", WITHIN_S)
        assert server.connections == 0

    async def test_a_loopback_provider_is_refused_unless_the_policy_allows_it(self, serve):
        server = await serve(answering(OK))
        strict = NativePool(
            limit=8,
            keepalive_s=30,
            ssl_context=ssl.create_default_context(),
            policy=OutboundPolicy.allowing(()),
        )
        try:
            with pytest.raises(ProviderError, match="blocked"):
                await post(strict, server)
        finally:
            await strict.aclose()
        assert server.connections == 0

    async def test_a_cancelled_call_leaves_its_connection_to_nobody(self, serve, pool):
        release = asyncio.Event()

        async def late_then_prompt(server, reader, writer, number):
            while await server.read(reader):
                if number == 1:
                    await release.wait()
                    writer.write(OK.replace(b"true", b"late"))
                else:
                    writer.write(OK)
                await writer.drain()

        server = await serve(late_then_prompt)
        call = asyncio.ensure_future(post(pool, server))
        while not server.requests:
            await asyncio.sleep(0.001)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()

        assert await post(pool, server) == (200, b'{"ok":true}')
        assert server.connections == 2
        assert pool.open_connections == 1  # the cancelled call's connection no longer counts


def held_until(gate: asyncio.Event) -> Script:
    """Each request answered once `gate` is set."""

    async def held(server, reader, writer, _):
        while await server.read(reader):
            await gate.wait()
            writer.write(OK)
            await writer.drain()

    return held


class TestLimit:
    async def test_past_its_limit_a_call_waits_for_a_connection(self, serve):
        gate = asyncio.Event()
        server = await serve(held_until(gate))
        small = NativePool(
            limit=2, keepalive_s=30, ssl_context=ssl.create_default_context(), policy=None
        )
        try:
            calls = [asyncio.ensure_future(post(small, server)) for _ in range(5)]
            while len(server.requests) < 2:
                await asyncio.sleep(0.001)
            assert small.open_connections == 2
            gate.set()
            answers = await asyncio.wait_for(asyncio.gather(*calls), WITHIN_S)
        finally:
            await small.aclose()

        assert answers == [(200, b'{"ok":true}')] * 5
        assert server.most_open == 2

    async def test_a_waiting_call_cancelled_passes_its_turn_on(self, serve):
        gate = asyncio.Event()
        server = await serve(held_until(gate))
        small = NativePool(
            limit=1, keepalive_s=30, ssl_context=ssl.create_default_context(), policy=None
        )
        try:
            first = asyncio.ensure_future(post(small, server))
            waiting = asyncio.ensure_future(post(small, server))
            third = asyncio.ensure_future(post(small, server))
            while not server.requests:
                await asyncio.sleep(0.001)
            # Cancelled in the very turn it is given the connection, before it runs.
            wake = small._wake

            def wake_then_cancel() -> None:
                wake()
                if not waiting.done():
                    waiting.cancel()

            small._wake = wake_then_cancel  # type: ignore[method-assign]
            gate.set()
            done = await asyncio.wait_for(asyncio.gather(first, third), WITHIN_S)
        finally:
            await small.aclose()

        assert done == [(200, b'{"ok":true}')] * 2
        assert waiting.cancelled()


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def read_all(connection) -> list[bytes]:
    pieces = []
    while (piece := await connection.read()) is not None:
        pieces.append(piece)
    return pieces


class TestStreams:
    async def test_a_piece_is_read_as_soon_as_it_comes(self, serve, pool):
        second = asyncio.Event()

        async def two_pieces(server, reader, writer, _):
            await server.read(reader)
            writer.write(CHUNKED_HEAD + chunk(b"one\n"))
            await writer.drain()
            await second.wait()
            writer.write(chunk(b"two\n") + b"0\r\n\r\n")
            await writer.drain()

        server = await serve(two_pieces)
        head, connection = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)

        assert head.status == 200
        assert head.headers["content-type"] == "application/x-ndjson"
        assert await connection.read() == b"one\n"  # before the second is even written
        second.set()
        assert await read_all(connection) == [b"two\n"]
        pool.finish(connection)

    async def test_a_stream_read_to_its_end_leaves_its_connection_for_the_next_call(
        self, serve, pool
    ):
        server = await serve(answering(CHUNKED_HEAD + chunk(b"a") + chunk(b"b") + b"0\r\n\r\n"))

        for _ in range(2):
            _, connection = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)
            assert b"".join(await read_all(connection)) == b"ab"
            pool.finish(connection)

        assert server.connections == 1
        assert pool.open_connections == 1

    async def test_a_stream_left_before_its_end_closes_its_connection(self, serve, pool):
        async def endless(server, reader, writer, number):
            while await server.read(reader):
                writer.write(CHUNKED_HEAD + chunk(b"first"))
                await writer.drain()
                if number == 1:
                    await reader.read(1)  # never ends: waits until the client leaves
                    return
                writer.write(b"0\r\n\r\n")
                await writer.drain()

        server = await serve(endless)
        _, connection = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)
        assert await connection.read() == b"first"
        pool.finish(connection)
        await asyncio.wait_for(server.closed.wait(), WITHIN_S)

        _, again = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)
        assert await read_all(again) == [b"first"]
        pool.finish(again)
        assert server.connections == 2
        assert pool.open_connections == 1

    async def test_a_stream_broken_off_mid_answer_is_a_read_error(self, serve, pool):
        async def broken(server, reader, writer, _):
            await server.read(reader)
            writer.write(CHUNKED_HEAD + chunk(b"half"))
            await writer.drain()

        server = await serve(broken)
        _, connection = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)

        with pytest.raises(httpx.ReadError):
            await read_all(connection)
        pool.finish(connection)
        assert pool.open_connections == 0

    async def test_a_stream_unread_past_its_high_water_stops_reading_until_read(self, serve, pool):
        piece = b"x" * 65536
        pieces = 16  # 1 MiB, four times the high water

        async def flood(server, reader, writer, _):
            await server.read(reader)
            writer.write(CHUNKED_HEAD)
            for _ in range(pieces):
                writer.write(chunk(piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

        server = await serve(flood)
        _, connection = await pool.open("POST", server.url, HEADERS, b"{}", WITHIN_S)
        for _ in range(int(WITHIN_S * 1000)):  # the pieces pile up unread until it stops
            if not connection.transport.is_reading():
                break
            await asyncio.sleep(0.001)
        assert not connection.transport.is_reading()

        assert len(b"".join(await read_all(connection))) == len(piece) * pieces
        assert connection.transport.is_reading()
        pool.finish(connection)


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self):
        for piece in self.pieces:
            yield piece


async def lines_of(response_class, pieces: list[bytes], headers=()) -> list[str]:
    response = response_class(200, headers=list(headers), stream=Pieces(pieces))
    return [line async for line in response.aiter_lines()]


LINE_CASES = [
    [b'data: {"a": 1}\n\ndata: [DONE]\n\n'],
    [b"one\r", b"\ntwo\r\n", b"three"],  # a "\r\n" cut between two pieces, an unended last line
    [b"one\rtwo\rthree\r"],  # "\r" alone
    [b"caf\xc3", b"\xa9 ", b"na\xc3\xafve\n"],  # a character cut between two pieces
    [b"", b"x", b"", b"y\n", b"\n", b"\n\n"],  # empty pieces, empty lines
    [b"bad \xff byte\n"],  # not UTF-8: replaced, as httpx does
]


class TestStreamLines:
    @pytest.mark.parametrize("pieces", LINE_CASES)
    async def test_a_native_streams_lines_are_httpxs_lines(self, pieces):
        assert await lines_of(NativeResponse, pieces) == await lines_of(httpx.Response, pieces)

    async def test_a_compressed_stream_goes_through_httpxs_decoders(self):
        body = gzip.compress(b"one\ntwo\n")
        headers = [("content-encoding", "gzip")]

        assert await lines_of(NativeResponse, [body[:7], body[7:]], headers) == ["one", "two"]


HEAD_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"


class TestOffTheNativePath:
    """What the native pool doesn't carry itself goes through httpx's pool, held to the same
    policy; aiohttp is loaded only by a process that chose it."""

    @pytest.fixture
    async def transport(self) -> AsyncIterator[NativeTransport]:
        limits = httpx.Limits(max_connections=4, keepalive_expiry=30)
        made = NativeTransport(limits=limits, policy=OutboundPolicy.allowing(("loopback",)))
        yield made
        await made.aclose()

    async def test_a_head_is_answered_without_a_body_despite_its_length(self, serve, transport):
        server = await serve(answering(HEAD_OK))
        fetched = await transport.fetch("HEAD", server.url, "127.0.0.1", HEADERS, None, WITHIN_S)

        assert (fetched.status, fetched.body) == (200, b"")
        assert fetched.headers["content-length"] == "11"
        assert server.requests[0].startswith(b"HEAD /api/chat HTTP/1.1\r\n")

    async def test_a_call_through_httpxs_api_is_answered(self, serve, transport):
        server = await serve(answering(OK))
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.post(server.url, content=b"{}")

        assert (response.status_code, response.content) == (200, b'{"ok":true}')

    async def test_the_policy_holds_off_the_native_path_too(self, serve):
        server = await serve(answering(HEAD_OK))
        limits = httpx.Limits(max_connections=4)
        refusing = NativeTransport(limits=limits, policy=OutboundPolicy.allowing(()))
        try:
            with pytest.raises(ProviderError, match="blocked by the URL policy"):
                await refusing.fetch("HEAD", server.url, "127.0.0.1", HEADERS, None, WITHIN_S)
        finally:
            await refusing.aclose()
        assert server.requests == []


def test_a_process_on_the_native_pool_loads_neither_aiohttp_nor_unused_certificates():
    program = (
        "import sys, asyncio\n"
        "import failover_site.asgi\n"
        "from gateway.adapters.pool import ClientSettings, make_client\n"
        "from gateway.engine.config import ProviderConfig\n"
        "config = ProviderConfig(name='p', kind='ollama', base_url='http://127.0.0.1:9',"
        " model='m', priority=1, is_local=True, timeout_s=5, context_window=8192)\n"
        "client = make_client(config, ClientSettings(http_client='native'))\n"
        "asyncio.run(client.aclose())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'yarl')))\n"
        "from gateway.adapters.native_http import default_tls\n"
        "print(default_tls.cache_info().currsize)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "failover_site.settings", "ENV_FILE": ""}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    # Nor the system's certificate authorities, having reached no provider over TLS.
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "0"]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl's): (its file, its key's file)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", "/CN=provider.test",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


class TestTls:
    """A provider over HTTPS (a cloud secondary): the certificate checked for the host."""

    @pytest.fixture
    def tls(self, certificate) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*certificate)
        return context

    async def test_a_provider_over_tls_answers_on_one_connection(self, serve, tls, certificate):
        server = await serve(answering(OK), tls)
        trusting = ssl.create_default_context(cafile=certificate[0])
        pool = NativePool(
            limit=4,
            keepalive_s=30,
            ssl_context=trusting,
            policy=OutboundPolicy.allowing(("loopback",)),
        )
        try:
            assert await post(pool, server) == (200, b'{"ok":true}')
            assert await post(pool, server) == (200, b'{"ok":true}')
        finally:
            await pool.aclose()
        assert server.connections == 1

    async def test_a_certificate_the_system_does_not_trust_is_refused(self, serve, tls, pool):
        server = await serve(answering(OK), tls)  # `pool` trusts the system's authorities

        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await post(pool, server)
        assert server.requests == []
