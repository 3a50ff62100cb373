"""A request body must arrive within REQUEST_BODY_TIMEOUT_S of its headers: a client that drips
it, or announces more than it sends, gets a 408 at the deadline and its connection closed. Seen
from a raw socket against a real uvicorn serving process, with the deadline set to 1 s."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from devtools.ports import free_port
from edge.body_deadline import WATCH_INTERVAL_S, BodyTimedOut, within_deadline

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """One uvicorn process in the embedded mode. Nothing here reaches a view, so it needs no
    database: the requests are refused while their bodies are read."""
    data_dir = tmp_path_factory.mktemp("body-deadline")
    services = {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    env = {key: value for key, value in os.environ.items() if key not in services}
    env.update(
        ENV_FILE="", DEBUG="true", DATA_DIR=str(data_dir), REQUEST_BODY_TIMEOUT_S=str(DEADLINE_S)
    )
    port = free_port()
    log = (data_dir / "uvicorn.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
         "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off",
         "--loop", "failover_site.event_loop:new_event_loop"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (data_dir / "uvicorn.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the serving process did not start"
            time.sleep(0.05)
        yield ("127.0.0.1", port)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        log.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    after_s: float  # from the request's headers to the answer
    closed: bool  # the server closed the connection after it


def _post(
    address: tuple[str, int],
    path: str,
    *,
    announced: int,
    chunks: list[bytes],
    every_s: float,
    content_type: str = "application/json",
) -> Answer:
    """POST with `Content-Length: announced`, sending `chunks` one every `every_s` seconds,
    then nothing more, until the server answers; then see whether it closes the connection."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {announced}\r\n\r\n".encode()
        )
        started = time.monotonic()
        pending = list(chunks)
        while not select.select([sock], [], [], every_s)[0]:
            assert time.monotonic() - started < 10, "no answer within 10 s"
            if pending:
                sock.sendall(pending.pop(0))
        after_s = time.monotonic() - started
        received = b""
        while not _complete(received):
            data = sock.recv(65536)
            assert data, f"the connection closed mid-answer: {received!r}"
            received += data
        # The answer is whole: a closed connection now reads as the end of the stream.
        closed = bool(select.select([sock], [], [], 0.5)[0]) and sock.recv(1) == b""
        return _parse(received, after_s, closed=closed)


def _complete(raw: bytes) -> bool:
    head, found, body = raw.partition(b"\r\n\r\n")
    if not found:
        return False
    if b"transfer-encoding: chunked" in head.lower():
        return body.endswith(b"0\r\n\r\n")
    lengths = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    return len(body) >= (lengths[0] if lengths else 0)


def _parse(raw: bytes, after_s: float, *, closed: bool) -> Answer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = _unchunked(body)
    return Answer(int(status_line.split()[1]), headers, body, after_s, closed)


def _unchunked(body: bytes) -> bytes:
    whole = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return whole
        whole += rest[:size]
        body = rest[size + 2 :]


def test_a_body_dripped_a_byte_at_a_time_gets_a_408_at_the_deadline(server):
    answer = _post(server, "/api/v1/complete", announced=200, chunks=[b"{"] * 200, every_s=0.2)
    assert answer.status == 408
    assert DEADLINE_S - 0.1 <= answer.after_s < DEADLINE_S + 1.0
    assert json.loads(answer.body)["error"]["code"] == "body_timeout"
    assert answer.headers["connection"] == "close"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.closed


def test_a_body_shorter_than_announced_gets_a_408_in_openais_shape(server):
    answer = _post(
        server, "/v1/chat/completions", announced=500, chunks=[b'{"model": "auto"'], every_s=0.1
    )
    assert answer.status == 408
    assert DEADLINE_S - 0.1 <= answer.after_s < DEADLINE_S + 1.0
    error = json.loads(answer.body)["error"]
    assert error["code"] == "body_timeout" and error["type"] == "invalid_request_error"
    assert "within 1 s" in error["message"]
    assert answer.closed


def test_the_admin_pages_have_the_same_deadline(server):
    answer = _post(
        server,
        "/admin/login/",
        announced=100,
        chunks=[b"u"] * 100,
        every_s=0.2,
        content_type="application/x-www-form-urlencoded",
    )
    assert answer.status == 408
    assert DEADLINE_S - 0.1 <= answer.after_s < DEADLINE_S + 1.0
    assert answer.headers["content-type"].startswith("text/plain")
    assert b"within 1 s" in answer.body
    assert answer.closed


def test_a_slow_body_that_arrives_within_the_deadline_is_served(server):
    body = b'{"prompt": "hi"}'
    answer = _post(
        server, "/api/v1/no-such-endpoint", announced=len(body), chunks=[
            body[i : i + 4] for i in range(0, len(body), 4)
        ], every_s=0.1
    )  # fmt: skip
    assert answer.status == 404  # the endpoint's own answer, not the deadline's
    assert json.loads(answer.body)["error"]["code"] == "not_found"
    assert not answer.closed  # and the connection stays open for the next request


async def _never() -> None:
    await asyncio.Event().wait()


async def test_a_read_past_its_deadline_is_cut_off_by_the_watch():
    started = time.monotonic()
    with pytest.raises(BodyTimedOut):
        await within_deadline(_never(), timeout_s=0.1)
    assert 0.1 <= time.monotonic() - started < 0.1 + 2 * WATCH_INTERVAL_S


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_deadline():
    reading = asyncio.ensure_future(within_deadline(_never(), timeout_s=60))
    await asyncio.sleep(0)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading


async def test_a_read_that_ended_in_time_is_not_cut_off_later():
    async def quick() -> str:
        await asyncio.sleep(0)
        return "body"

    assert await within_deadline(quick(), timeout_s=0.05) == "body"
    # Past that deadline the watch looks again: this task, reading no more, is left alone.
    await asyncio.sleep(2 * WATCH_INTERVAL_S)
