#!/usr/bin/env python3
"""A streamed answer's first token, one request at a time: the fake provider asked directly
(Ollama's `/api/chat`, `stream: true`) and through the gateway (`POST /v1/chat/completions`,
`stream: true`), and with --baseline DIR another commit's gateway beside this tree's. Each
figure is the time from the request's first byte sent to the first piece of text received, on
a kept-alive connection; the gateway's cost is its median over the direct median. Standard
library only: run it as a script, `python bench/first_token.py`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_complete import preflight
from process import add_gateway_options, uvicorn
from procs import (
    BENCH_KEY,
    LOAD_CPU,
    SERVER_CPU,
    BenchError,
    Processes,
    free_port,
    guarded_run,
    stop_on_signals,
    wait_ready,
)
from report import machine_facts
from targets import MODEL, PROMPT, Bench, Variant, client_env

DIRECT_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": True}
)
GATEWAY_BODY = json.dumps(
    {"model": "auto", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
)
TIMEOUT_S = 10.0
# The goal for a stream's first token through the gateway, over the provider's own (median).
GOAL_OVER_DIRECT_MS = 1.0
# Measured in this many rounds, every target in each (see `measure`).
ROUNDS = 10


def parse_args(argv: list[str]) -> argparse.Namespace:
    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__.split(".")[0], formatter_class=formatter)
    add = parser.add_argument
    add("--requests", type=int, default=400, help="Measured streams per target.")
    add("--warmup-requests", type=int, default=50, help="Streams before measuring, per target.")
    add_gateway_options(add)
    args = parser.parse_args(argv)
    if args.requests < 10 or args.warmup_requests < 0:
        parser.error("--requests ≥ 10, --warmup-requests ≥ 0")
    args.options = dict(vars(args))
    args.duration, args.warmup = 1.0, 0.0  # targets.Bench's wrk, which this script doesn't run
    # What targets.Bench and bench_complete.preflight read: one gateway, no Redis.
    args.transports, args.targets, args.endpoints = [args.transport], ["gateway"], ["chat"]
    args.redis = args.shared_redis = args.primary_refused = False
    return args


def direct_text(line: bytes) -> bool:
    """An Ollama stream line that carries text."""
    try:
        return bool(json.loads(line).get("message", {}).get("content"))
    except ValueError:
        return False


def sse_text(line: bytes) -> bool:
    """An OpenAI server-sent event whose delta carries text."""
    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
        return False
    try:
        choices = json.loads(line[6:]).get("choices") or [{}]
    except ValueError:
        return False
    return bool((choices[0].get("delta") or {}).get("content"))


def first_token_s(
    connection: http.client.HTTPConnection,
    path: str,
    body: str,
    headers: dict[str, str],
    has_text: Callable[[bytes], bool],
) -> float:
    """Seconds from sending the request to the first line with text; the rest is read to the
    end (so the connection is reused). A stream that ends with no text, or an answer other
    than 200, aborts the run: it would not measure a first token."""
    began = time.perf_counter()
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    if response.status != 200:
        raise BenchError(f"POST {path} answered {response.status}: {response.read()[:300]!r}")
    tier = response.getheader("x-failover-tier")
    if path != "/api/chat" and tier != "primary":
        # A cached or static answer streams text too: not the provider's first token.
        raise BenchError(f"POST {path} was answered by tier {tier!r}, not the provider")
    first = None
    while line := response.readline():
        if first is None and has_text(line.strip()):
            first = time.perf_counter() - began
    if first is None:
        raise BenchError(f"POST {path}: the stream ended without text")
    return first


class Target:
    """One thing measured: its kept-alive connection, its request and its times."""

    def __init__(self, name: str, url: str, path: str, body: str, headers: dict[str, str]):
        self.name, self.path, self.body, self.headers = name, path, body, headers
        self.has_text = direct_text if path == "/api/chat" else sse_text
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
        self.times: list[float] = []

    def once(self) -> float:
        return first_token_s(self.connection, self.path, self.body, self.headers, self.has_text)

    def result(self) -> dict[str, Any]:
        times = sorted(self.times)
        return {
            "median_ms": round(1000 * statistics.median(times), 3),
            "p90_ms": round(1000 * times[int(0.9 * (len(times) - 1))], 3),
            "min_ms": round(1000 * times[0], 3),
            "requests": len(times),
        }


def measure(targets: list[Target], args: Any) -> dict[str, Any]:
    """Every target warmed up, then measured in ROUNDS rounds, each target's share of a round
    in turn: a machine that slows down midway slows them all alike."""
    for target in targets:
        for _ in range(args.warmup_requests):
            target.once()
    share = max(1, args.requests // ROUNDS)
    for _ in range(ROUNDS):
        for target in targets:
            target.times += [target.once() for _ in range(share)]
    results = {}
    for target in targets:
        target.connection.close()
        found = results[target.name] = target.result()
        print(
            f"  {target.name:<22} first token: median {found['median_ms']:7.3f} ms  "
            f"p90 {found['p90_ms']:7.3f} ms  min {found['min_ms']:7.3f} ms",
            flush=True,
        )
    return results


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        pin = preflight(args)  # the interpreter, the pinning, the baseline's imports
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop_on_signals()
    work = Path(tempfile.mkdtemp(prefix="bench-first-token-"))
    procs, loose = Processes(pin, work), Processes(False, work)

    def run() -> None:
        bench = Bench(args, loose, work)
        bench.ensure_upstream()
        for variant in bench.variants:
            bench.setup_gateway(variant)
        # This script is the client: on the load's CPU, the gateway alone on its own.
        if pin:
            os.sched_setaffinity(0, {LOAD_CPU})
        plain = {"Content-Type": "application/json"}
        keyed = {**plain, "Authorization": f"Bearer {BENCH_KEY}"}
        targets = [Target("direct", bench.upstream_url, "/api/chat", DIRECT_BODY, plain)]
        served = []
        try:
            for variant in bench.variants:
                proc, url = start(variant, procs, args)
                served.append(proc)
                targets.append(
                    Target(
                        f"gateway{variant.label}", url, "/v1/chat/completions", GATEWAY_BODY, keyed
                    )  # fmt: skip
                )
            results = measure(targets, args)
        finally:
            for proc in served:
                procs.stop(proc)
        direct = results["direct"]["median_ms"]
        over = ", ".join(
            f"{label} +{found['median_ms'] - direct:.3f} ms"
            + ("" if found["median_ms"] - direct <= GOAL_OVER_DIRECT_MS else " (MISSES)")
            for label, found in results.items()
            if label != "direct"
        )
        print(f"\nOver direct (median; the goal ≤ +{GOAL_OVER_DIRECT_MS:g} ms): {over}")
        if args.json:
            out = {"machine": machine_facts(args.python, pin), "config": args.options,
                   "results": results}  # fmt: skip
            Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
            print(f"JSON written to {args.json}")

    def cleanup() -> None:
        procs.stop_all()
        loose.stop_all()

    return guarded_run(work, args.keep, run, cleanup)


def start(variant: Variant, procs: Processes, args: Any) -> tuple[Any, str]:
    """The variant's gateway, as the other benches serve it, on the server's CPU."""
    port = free_port()
    env = {**variant.env, **client_env(args.transport)}
    argv = uvicorn(args.python, port, 1, variant.root)
    proc = procs.start(f"gateway{variant.label}-{port}", argv, env, SERVER_CPU, cwd=variant.root)
    url = f"http://127.0.0.1:{port}"
    wait_ready(proc, f"{url}/healthz")
    return proc, url


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
