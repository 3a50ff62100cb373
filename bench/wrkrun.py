"""wrk: one measured run (after a discarded warm-up) and the parse of its text output."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from procs import BENCH_DIR, BENCH_KEY, LOAD_CPU, BenchError, Processes

LUA_SCRIPT = BENCH_DIR / "post.lua"
WARMUP_S = 2
WRK_TIMEOUT = "5s"


@dataclass
class Run:
    target: str
    connections: int
    threads: int
    duration_s: float
    rps: float
    requests: int
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.non_2xx + sum(self.socket_errors.values())


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _duration_ms(value: str, unit: str) -> float:
    return float(value) * _UNITS_MS[unit]


def parse_wrk(output: str) -> dict[str, Any]:
    """req/s, the latency percentiles (--latency), non-2xx and socket errors from wrk's text."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    total = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m),", output, re.M)
    if rps is None or total is None:
        raise BenchError(f"cannot parse wrk's output:\n{output}")
    percentiles = {}
    for pct in (50, 75, 90, 99):
        found = re.search(rf"^\s*{pct}(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.M)
        percentiles[pct] = _duration_ms(*found.groups()) if found else float("nan")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sock = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    socket_errors = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()), strict=True))
        if sock
        else {}
    )
    return {
        "rps": float(rps.group(1)),
        "requests": int(total.group(1)),
        "percentiles": percentiles,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": {k: v for k, v in socket_errors.items() if v},
    }


def wrk_threads(connections: int) -> int:
    return min(2 if connections >= 64 else 1, connections)


def wrk_argv(url: str, connections: int, seconds: float, latency: bool = True) -> list[str]:
    return [
        "wrk",
        f"-t{wrk_threads(connections)}",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--timeout",
        WRK_TIMEOUT,
        *(["--latency"] if latency else []),
        "-s",
        str(LUA_SCRIPT),
        url,
    ]


class Wrk:
    def __init__(self, procs: Processes, duration: float, warmup: float) -> None:
        self.procs = procs
        self.duration = duration
        self.warmup = warmup

    def _once(self, url: str, body: str, connections: int, seconds: float) -> dict[str, Any]:
        argv = wrk_argv(url, connections, seconds)
        env = {**os.environ, "BENCH_BODY": body, "BENCH_KEY": BENCH_KEY}
        done = self.procs.run("wrk", argv, env, LOAD_CPU, timeout=seconds + 30)
        if done.returncode != 0:
            raise BenchError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
        parsed = parse_wrk(done.stdout)
        parsed["threads"] = wrk_threads(connections)
        return parsed

    def measure(self, target: str, url: str, body: str, connections: int) -> Run:
        if self.warmup > 0:
            self._once(url, body, connections, self.warmup)
        parsed = self._once(url, body, connections, self.duration)
        pct = parsed["percentiles"]
        return Run(
            target=target,
            connections=connections,
            threads=parsed["threads"],
            duration_s=self.duration,
            rps=parsed["rps"],
            requests=parsed["requests"],
            p50_ms=pct[50],
            p75_ms=pct[75],
            p90_ms=pct[90],
            p99_ms=pct[99],
            non_2xx=parsed["non_2xx"],
            socket_errors=parsed["socket_errors"],
        )
