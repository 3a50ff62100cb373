"""Redis for the gateway+redis targets: a server of its own, or the shared one.

A gateway+redis target gets a Redis server of its own, started by this run on a free port
(`redis-server --save "" --appendonly no`), when `redis-server` is on the PATH and not
--shared-redis; otherwise the shared one on 127.0.0.1:6379. Either way the gateway uses db 12,
flushed before and after (never another db). Standard library only: a minimal RESP client, the
`INFO all` counters, and a MONITOR tap (see rediscount.py for what is counted with them).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import START_TIMEOUT_S, BenchError, Processes, free_port

REDIS_DB = 12
SHARED_HOST, SHARED_PORT = "127.0.0.1", 6379


class RespError(Exception):
    pass


class Resp:
    """A minimal RESP2 client (stdlib only): one connection, one command at a time."""

    def __init__(self, host: str, port: int, timeout: float | None = 5) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def send(self, *commands: tuple[Any, ...]) -> None:
        """Several commands in one write (a pipeline)."""
        out = bytearray()
        for command in commands:
            out += b"*%d\r\n" % len(command)
            for arg in command:
                data = str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(data), data)
        self.sock.sendall(out)

    def reply(self) -> Any:
        line = self.file.readline()
        if not line.endswith(b"\r\n"):
            raise RespError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.file.read(size + 2)[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.reply() for _ in range(size)]
        raise RespError(f"unexpected reply {line!r}")

    def call(self, *command: Any) -> Any:
        self.send(command)
        return self.reply()

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@dataclass
class Counters:
    at: float
    total_commands: int
    reads: int
    writes: int
    commands: dict[str, int] = field(default_factory=dict)

    def __sub__(self, other: Counters) -> Counters:
        # Each snapshot is one INFO on one connection: the later one's read, the earlier one's
        # command and reply fall between two snapshots. They are not the gateway's.
        commands = {k: v - other.commands.get(k, 0) for k, v in self.commands.items()}
        commands["info"] = commands.get("info", 0) - 1
        return Counters(
            at=self.at - other.at,
            total_commands=self.total_commands - other.total_commands - 1,
            reads=self.reads - other.reads - 1,
            writes=self.writes - other.writes - 1,
            commands={k: v for k, v in commands.items() if v},
        )


def parse_info(text: str, at: float) -> Counters:
    stats = dict(re.findall(r"^(total_\w+):(\d+)\r?$", text, re.M))
    commands = {
        name: int(calls) for name, calls in re.findall(r"^cmdstat_(\S+?):calls=(\d+)", text, re.M)
    }
    return Counters(
        at=at,
        total_commands=int(stats.get("total_commands_processed", 0)),
        reads=int(stats.get("total_reads_processed", 0)),
        writes=int(stats.get("total_writes_processed", 0)),
        commands=commands,
    )


class RedisServer:
    """The Redis of one gateway+redis target."""

    def __init__(self, host: str, port: int, proc: Any = None) -> None:
        self.host, self.port, self.proc = host, port, proc
        self._info: Resp | None = None

    @property
    def dedicated(self) -> bool:
        return self.proc is not None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/{REDIS_DB}"

    @classmethod
    def shared(cls) -> RedisServer:
        return cls(SHARED_HOST, SHARED_PORT)

    @classmethod
    def start(cls, procs: Processes, name: str, work: Path, cpu: int | None = None) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise BenchError("redis-server not found")
        port = free_port()
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", str(work)]  # fmt: skip
        server = cls("127.0.0.1", port, procs.start(name, argv, {}, cpu))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.proc.poll() is not None:
                raise BenchError(f"{name} exited with {server.proc.returncode} while starting")
            try:
                conn = Resp(server.host, port, timeout=2)
                try:
                    if conn.call("PING") == "PONG":
                        return server
                finally:
                    conn.close()
            except (OSError, RespError):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"{name} not answering PING on :{port} after {START_TIMEOUT_S} s")
            time.sleep(0.05)

    def flush(self) -> None:
        """FLUSHDB on db 12 only (never another db, never FLUSHALL)."""
        try:
            conn = Resp(self.host, self.port, timeout=3)
            try:
                conn.send(("SELECT", REDIS_DB), ("FLUSHDB",))
                for _ in range(2):
                    conn.reply()
            finally:
                conn.close()
        except (OSError, RespError) as exc:
            raise BenchError(f"cannot flush {self.url}: {exc}") from None

    def snapshot_source(self) -> str:
        """The address the snapshots come from, as MONITOR shows it."""
        if self._info is None:
            self._info = Resp(self.host, self.port)
        host, port = self._info.sock.getsockname()[:2]
        return f"{host}:{port}"

    def snapshot(self) -> Counters:
        if self._info is None:
            self._info = Resp(self.host, self.port)
        text = self._info.call("INFO", "all")
        return parse_info(text, time.monotonic())

    def one_read_per_write(self) -> bool:
        """Whether this server counts a pipeline sent in one write as one read event (only
        meaningful on a server nobody else uses)."""
        conn = Resp(self.host, self.port)
        try:
            before = self.snapshot()
            conn.send(("SELECT", REDIS_DB), ("EXISTS", "bench:x"), ("MGET", "bench:x", "bench:y"))
            for _ in range(3):
                conn.reply()
            conn.call("EXISTS", "bench:x")
            delta = self.snapshot() - before
        finally:
            conn.close()
        return delta.reads == 2 and delta.total_commands == 4

    def close(self) -> None:
        if self._info is not None:
            self._info.close()
            self._info = None


_MONITOR_LINE = re.compile(rb'^\+?[\d.]+ \[(\d+) ([^\]]+)\] "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Event:
    db: int
    source: str  # the client's address, or "lua": run inside a script
    command: str


class MonitorTap:
    """MONITOR on a connection of its own, read by a thread: every command the server runs,
    with its db and its source. Only on a dedicated server (on a shared one it would slow every
    other client down)."""

    def __init__(self, server: RedisServer) -> None:
        self.conn = Resp(server.host, server.port, timeout=None)
        if self.conn.call("MONITOR") != "OK":
            raise BenchError("redis: MONITOR refused")
        self.lines: list[bytes] = []
        self.thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.conn.file:
                self.lines.append(line)
        except (OSError, ValueError):
            pass  # closed by stop()

    def stop(self) -> list[Event]:
        with contextlib.suppress(OSError):
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.conn.close()
        events = []
        for line in self.lines:
            found = _MONITOR_LINE.match(line)
            if found:
                db, source, command = found.groups()
                events.append(Event(int(db), source.decode(), command.decode().lower()))
        return events
