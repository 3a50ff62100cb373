"""The serving loop (`failover_site.event_loop`): uvloop, with every waiting connection accepted
in one turn of the loop rather than one connection a turn, over real loopback sockets."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest

from failover_site.event_loop import SHARED_ACCEPT_PER_TURN, GreedyServer, new_event_loop

pytestmark = pytest.mark.backend_free

QUEUED = 24  # connections waiting in the kernel while the loop is busy
WITHIN_S = 5.0


class Echo(asyncio.Protocol):
    """Answers each chunk with itself, and notes the turn of the loop it was connected in."""

    made: list[int]
    turns: list[int]

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.made.append(self.turns[0])

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def run(scenario: Any) -> Any:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(scenario(), WITHIN_S))
    finally:
        loop.close()


def protocol_noting(made: list[int], turns: list[int]) -> Any:
    def make() -> Echo:
        protocol = Echo()
        protocol.made, protocol.turns = made, turns
        return protocol

    return make


def count_turns(turns: list[int]) -> list[asyncio.Handle]:
    """turns[0] grows by one each turn of the running loop (a callback that schedules itself);
    the returned list holds its latest handle, to cancel."""
    loop = asyncio.get_running_loop()

    def tick() -> None:
        turns[0] += 1
        handles[0] = loop.call_soon(tick)

    handles = [loop.call_soon(tick)]
    return handles


def test_connections_waiting_while_the_loop_was_busy_are_all_let_in_at_once():
    async def scenario() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        made: list[int] = []
        turns = [0]
        server = await loop.create_server(protocol_noting(made, turns), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        handles = count_turns(turns)
        # The loop is busy (this callback holds it) while the clients connect and send: the
        # kernel completes each connection and queues it for the loop to accept.
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(QUEUED)]
        for client in clients:
            client.sendall(b"x")
        first = turns[0]
        while len(made) < QUEUED:
            await asyncio.sleep(0)
        handles[0].cancel()
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()
        return made, first

    made, first = run(scenario)

    assert len(made) == QUEUED
    # One turn to accept them all and one to run their connection_made (uvloop's own server
    # takes a turn per connection: QUEUED turns).
    assert max(made) - first <= 3


def test_from_a_socket_handed_in_it_takes_a_few_connections_a_turn():
    """A socket uvicorn hands in is shared by its workers: a worker that took all of a burst
    in one turn would serve it alone while the others idle."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def scenario() -> list[int]:
        loop = asyncio.get_running_loop()
        made: list[int] = []
        turns = [0]
        server = await loop.create_server(protocol_noting(made, turns), sock=listener)
        handles = count_turns(turns)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(QUEUED)]
        while len(made) < QUEUED:
            await asyncio.sleep(0)
        handles[0].cancel()
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()
        return made

    made = run(scenario)

    per_turn = max(made.count(turn) for turn in set(made))
    assert per_turn == SHARED_ACCEPT_PER_TURN
    assert len(set(made)) >= QUEUED // SHARED_ACCEPT_PER_TURN


def test_a_connection_is_served_and_a_closed_server_takes_no_more():
    async def scenario() -> tuple[bytes, bool, bool]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol_noting([], [0]), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        echoed = await reader.readexactly(5)
        writer.close()
        serving = server.is_serving()
        server.close()
        await server.wait_closed()
        try:
            await asyncio.open_connection("127.0.0.1", port)
            refused = False
        except OSError:
            refused = True
        return echoed, serving, refused

    echoed, serving, refused = run(scenario)

    assert echoed == b"hello"
    assert serving
    assert refused


def test_a_listening_socket_it_is_given_is_accepted_from_the_same_way():
    """As uvicorn gives one with --workers, --fd or gunicorn."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    async def scenario() -> tuple[bool, bytes]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol_noting([], [0]), sock=listener, backlog=64)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        echoed = await reader.readexactly(4)
        writer.close()
        server.close()
        await server.wait_closed()
        return isinstance(server, GreedyServer), echoed

    greedy, echoed = run(scenario)

    assert greedy
    assert echoed == b"ping"


def test_every_interface_is_listened_on_when_no_host_is_named():
    async def scenario() -> set[int]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol_noting([], [0]), None, 0)
        families = {sock.family for sock in server.sockets}
        server.close()
        await server.wait_closed()
        return families

    assert socket.AF_INET in run(scenario)


class OutOfFiles:
    """A listener whose accept() fails as a process out of file descriptors does."""

    def __init__(self) -> None:
        self.calls = 0

    def accept(self) -> Any:
        self.calls += 1
        raise OSError(errno.EMFILE, "Too many open files")

    def fileno(self) -> int:
        return self._fd

    def setblocking(self, flag: bool) -> None:
        pass


def test_out_of_file_descriptors_pauses_accepting_instead_of_spinning():
    real = socket.create_server(("127.0.0.1", 0))

    async def scenario() -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        listener = OutOfFiles()
        listener._fd = real.fileno()
        server = GreedyServer(
            loop, [listener], protocol_noting([], [0]), per_turn=8, ssl=None,  # type: ignore[list-item]
            ssl_handshake_timeout=None,
        )  # fmt: skip
        await server.start_serving()
        client = socket.create_connection(real.getsockname())  # the listener turns readable
        for _ in range(50):
            await asyncio.sleep(0)
        reading = loop.remove_reader(real.fileno())
        client.close()
        server._sockets = []  # the real socket is closed below, not by the server
        server.close()
        return listener.calls, reading

    calls, still_reading = run(scenario)
    real.close()

    assert calls == 1  # tried once, then stopped watching the listener
    assert not still_reading
