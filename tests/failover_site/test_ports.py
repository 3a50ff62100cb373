"""The servers the drill and the tests start get ports outside the kernel's ephemeral range,
free when picked; a port someone holds is passed over."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devtools import ports

pytestmark = pytest.mark.backend_free


def test_a_port_is_below_the_ephemeral_range_and_free():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        port = ports.free_port()
        assert ports.SERVER_PORTS.start <= port < min(ports.SERVER_PORTS.stop, low + 1)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it


def test_a_port_someone_listens_on_is_passed_over(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        picks = iter([taken, free])
        monkeypatch.setattr(ports.random, "choice", lambda _: next(picks))
        assert ports.free_port() == free
