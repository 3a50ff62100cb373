"""Ports for the servers the drill and the tests start in child processes.

A port found free by binding to port 0 comes from the kernel's ephemeral range, which the kernel
also hands to every outgoing connection: on a busy machine it can be taken in the seconds before
the child binds it. A port below that range is never handed out on its own.
"""

from __future__ import annotations

import random
import socket

SERVER_PORTS = range(10_000, 32_768)  # below Linux's default ephemeral range (32768-60999)


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range, picked at random so
    that servers started at the same time by separate processes don't pick the same one."""
    while True:
        port = random.choice(SERVER_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
