#!/usr/bin/env python3
"""Throughput and latency of `POST /api/v1/complete` and `POST /v1/chat/completions`, against
the floors under it.

    .venv/bin/python bench/bench_complete.py                 # defaults: ~5 minutes
    .venv/bin/python bench/bench_complete.py --duration 4 --connections 16 --targets gateway
    .venv/bin/python bench/bench_complete.py --redis --json /tmp/bench.json
    .venv/bin/python bench/bench_complete.py --targets gateway --baseline /tmp/bench-baseline

One run measures requests/s and p50/p99 latency with wrk at each connection count for:

  direct       the fake provider itself (`manage.py fakeprovider`), hit with the exact POST the
               gateway sends it (Ollama `/api/chat`, `stream: false`);
  floor        bench/passthrough.py with no httpx at all: raw ASGI, one pooled
               aiohttp.ClientSession forwarding the body (`passthrough[bare]`): the Python floor;
  passthrough  bench/passthrough.py: raw ASGI, one pooled httpx.AsyncClient, forwarding the body
               to the fake provider (per transport: httpx's own pool, aiohttp's under httpx);
  gateway      the platform (`uvicorn failover_site.asgi:application`), embedded mode, DEBUG=false,
               one Ollama provider pointing at the fake provider (per transport), on each of
               --endpoints: `gateway[T]` POST /api/v1/complete, `gateway-chat[T]` POST
               /v1/chat/completions (model "auto", as the openai SDK sends it);
  gateway+redis  the same with REDIS_URL (only with --redis; db 12, flushed before and after,
               of a Redis server of its own when redis-server is installed), and then the Redis
               commands and round trips one request costs;
  gateway@baseline, gateway+redis@baseline
               the same from another commit's checkout (--baseline DIR), measured interleaved
               with this tree's and compared with it.

Every server is one uvicorn process with uvloop + httptools, no access log. With taskset (and
2+ CPUs) the measured server runs on CPU 0, wrk and the fake provider on CPU 1 (for `direct`
the fake provider is the measured server: it gets CPU 0 alone). --no-pin turns that off.

Standard library only: run it with any Python 3.11+; the servers run with --python (default the
project's .venv). Every process it starts is stopped at the end, also on Ctrl-C or an error.
Needs wrk (`apt-get install -y wrk`). See bench/README.md. The modules beside this file
(procs, wrkrun, targets, redisbench, rediscount, compare, profiling, report) import as siblings:
run it as a script, `python bench/bench_complete.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from procs import (
    LOAD_CPU,
    ROOT,
    SERVER_CPU,
    BenchError,
    Processes,
    guarded_run,
    stop_on_signals,
)
from redisbench import SHARED_HOST, SHARED_PORT
from report import machine_facts, report
from targets import (
    ENDPOINTS,
    GATEWAY_TRANSPORTS,
    PASSTHROUGH_TRANSPORTS,
    Bench,
    pythonpath_for,
)
from wrkrun import WARMUP_S


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark POST /api/v1/complete and POST /v1/chat/completions against the "
        "fake provider and a bare proxy.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=8, help="Measured seconds per run.")
    parser.add_argument(
        "--warmup", type=float, default=WARMUP_S, help="Warm-up seconds before each run."
    )
    parser.add_argument(
        "--connections", default="1,16,64", help="Comma-separated connection counts."
    )
    parser.add_argument(
        "--targets",
        default="direct,floor,passthrough,gateway",
        help="Any of direct, floor, passthrough, gateway.",
    )
    parser.add_argument(
        "--transports",
        default="default,aiohttp",
        help="Any of httpx, aiohttp, native, default (each checkout's own; passthrough: the "
        "first two only).",
    )
    parser.add_argument(
        "--endpoints",
        default="complete,chat",
        help="The gateway's endpoints: complete (POST /api/v1/complete, the target gateway[T]) "
        "and chat (POST /v1/chat/completions, gateway-chat[T]).",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="Also the gateway on Redis (db 12 of a Redis server started for the run, or of "
        f"{SHARED_HOST}:{SHARED_PORT} without redis-server), and its Redis work per request.",
    )
    parser.add_argument(
        "--shared-redis",
        action="store_true",
        help=f"With --redis: use {SHARED_HOST}:{SHARED_PORT} (db 12) even if redis-server exists.",
    )
    parser.add_argument(
        "--redis-cpu",
        type=int,
        default=None,
        help="With --redis: pin the dedicated Redis server to this CPU (default: unpinned). The "
        "load's CPU keeps it off the gateway's core, as a Redis on another machine would be.",
    )
    parser.add_argument(
        "--redis-count",
        type=int,
        default=2000,
        metavar="N",
        help="With --redis: requests in the counted burst.",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="A checkout of another commit (git worktree add): its gateway too, interleaved.",
    )
    parser.add_argument(
        "--primary-refused",
        action="store_true",
        help="Put a refusing self-hosted primary (a closed port) before this tree's fake "
        "provider: its throughput with its primary down and its breaker open, served by the "
        "next (against a healthy --baseline, a worktree of the same commit, for the ratio).",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="Also this tree's gateway exporting a trace of every request over OTLP/HTTP "
        "(OTEL_EXPORTER_OTLP_ENDPOINT) to a receiver on the load's CPU (gateway+otel): the "
        "cost of tracing, beside the same tree without it.",
    )
    parser.add_argument("--no-pin", action="store_true", help="Don't pin processes to CPUs.")
    parser.add_argument("--json", metavar="PATH", help="Write the results as JSON here.")
    parser.add_argument(
        "--python",
        default=str(ROOT / ".venv" / "bin" / "python")
        if (ROOT / ".venv" / "bin" / "python").exists()
        else sys.executable,
        help="The interpreter the servers run with.",
    )
    parser.add_argument("--py-spy", action="store_true", help="Profile each gateway with py-spy.")
    parser.add_argument("--py-spy-seconds", type=int, default=5)
    parser.add_argument("--py-spy-connections", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="Keep the temp dir (logs, SQLite).")
    args = parser.parse_args(argv)
    try:
        args.connections = [int(c) for c in args.connections.split(",") if c.strip()]
    except ValueError:
        parser.error("--connections: comma-separated integers")
    if not args.connections or min(args.connections) < 1:
        parser.error("--connections: at least one count, each ≥ 1")
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if bad := set(args.targets) - {"direct", "floor", "passthrough", "gateway"}:
        parser.error(f"--targets: unknown {', '.join(sorted(bad))}")
    if bad := set(args.transports) - set(GATEWAY_TRANSPORTS):
        parser.error(f"--transports: unknown {', '.join(sorted(bad))}")
    args.endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    if bad := set(args.endpoints) - set(ENDPOINTS):
        parser.error(f"--endpoints: unknown {', '.join(sorted(bad))}")
    if not args.endpoints:
        parser.error("--endpoints: at least one of complete, chat")
    if args.duration <= 0 or args.warmup < 0:
        parser.error("--duration must be > 0 and --warmup ≥ 0")
    if args.redis_count < 1:
        parser.error("--redis-count must be ≥ 1")
    if args.baseline and "gateway" not in args.targets:
        parser.error("--baseline measures gateways: --targets must include gateway")
    return args


def preflight(args: argparse.Namespace) -> bool:
    """Refuse to start without what the run needs; returns whether to pin."""
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed. Install it with:  sudo apt-get install -y wrk")
    if not Path(args.python).exists():
        raise BenchError(f"--python {args.python} does not exist (make install creates .venv)")
    shared_redis = args.shared_redis or shutil.which("redis-server") is None
    if "gateway" in args.targets and args.redis and shared_redis:
        try:
            with socket.create_connection((SHARED_HOST, SHARED_PORT), timeout=2):
                pass
        except OSError as exc:
            raise BenchError(
                f"--redis: no redis-server to start, and nothing listens on "
                f"{SHARED_HOST}:{SHARED_PORT} ({exc})"
            ) from None
    args.baseline_info = check_baseline(args) if args.baseline else None
    pin = not args.no_pin
    if pin and shutil.which("taskset") is None:
        print("note: taskset not found, processes are not pinned", file=sys.stderr)
        pin = False
    if pin and len(os.sched_getaffinity(0)) < 2:
        print("note: fewer than 2 CPUs available, processes are not pinned", file=sys.stderr)
        pin = False
    if pin and not {SERVER_CPU, LOAD_CPU} <= os.sched_getaffinity(0):
        print(
            f"note: CPUs {SERVER_CPU} and {LOAD_CPU} not both available, not pinned",
            file=sys.stderr,
        )
        pin = False
    args.no_pin = not pin
    return pin


def check_baseline(args: argparse.Namespace) -> dict[str, Any]:
    """The baseline is another checkout, and its servers really import its code (its own dir
    ahead of the editable install of this tree): else the comparison compares nothing."""
    base = Path(args.baseline).resolve()
    args.baseline = base
    if not (base / "manage.py").is_file() or not (base / "failover_site").is_dir():
        raise BenchError(f"--baseline {base}: not a checkout of this project (no manage.py)")
    if base == ROOT:
        raise BenchError(f"--baseline {base} is this tree")
    probe = (
        "import os, failover_site, providers; "
        "print(os.path.dirname(providers.__file__)); print(os.path.dirname(failover_site.__file__))"
    )
    env = {**os.environ, "PYTHONPATH": pythonpath_for(base)}
    done = subprocess.run(
        [args.python, "-c", probe], cwd=base, env=env, capture_output=True, text=True, timeout=60
    )
    dirs = done.stdout.split()
    if done.returncode != 0 or len(dirs) != 2:
        raise BenchError(f"--baseline: cannot import its packages:\n{done.stderr}")
    for found in dirs:
        if not Path(found).resolve().is_relative_to(base):
            raise BenchError(
                f"--baseline: with PYTHONPATH={base} the servers would import {found}, "
                f"not the baseline's code"
            )
    git = subprocess.run(
        ["git", "-C", str(base), "log", "-1", "--format=%h%x00%s"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    commit, _, subject = git.stdout.strip().partition("\0")
    dirty = subprocess.run(
        ["git", "-C", str(base), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    info = {
        "dir": str(base),
        "commit": (commit or "unknown") + (" (with local changes)" if dirty.stdout.strip() else ""),
        "subject": subject,
        "imports": dirs,
    }
    print(
        f"baseline: {base} at {info['commit']} {subject!r}; its servers import providers from "
        f"{dirs[0]}",
        flush=True,
    )
    return info


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        pin = preflight(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop_on_signals()

    per_run = args.warmup + args.duration + 0.3
    variants = 1 + bool(args.baseline) + args.otel
    gateways = ("gateway" in args.targets) * len(args.transports) * (1 + args.redis) * variants
    servers = ("direct" in args.targets) + ("floor" in args.targets)
    servers += len(set(args.transports) & set(PASSTHROUGH_TRANSPORTS)) * (
        "passthrough" in args.targets
    )
    servers += gateways
    # Each gateway server is measured once per endpoint.
    runs = servers + gateways * (len(args.endpoints) - 1)
    estimate = runs * len(args.connections) * per_run + 8 * servers + 15
    if args.redis:  # the counted burst and as long with no requests, per gateway+redis
        estimate += gateways / 2 * (2 * (args.redis_count + 200) / 500 + 2)
    print(
        f"bench_complete: targets {','.join(args.targets)}; transports {','.join(args.transports)}"
        f"; endpoints {','.join(args.endpoints)}"
        f"{'; +redis' if args.redis else ''}{'; +baseline' if args.baseline else ''}"
        f"{'; +otel' if args.otel else ''}; "
        f"connections {','.join(map(str, args.connections))}; "
        f"{args.duration:g} s per run (+{args.warmup:g} s warm-up); about {estimate / 60:.1f} min",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="bench-complete-"))
    procs = Processes(pin, work)
    bench = Bench(args, procs, work)
    started = time.monotonic()

    def run() -> None:
        facts = machine_facts(args.python, pin)
        if "direct" in args.targets:
            bench.direct()
        if "floor" in args.targets:
            bench.passthrough("bare")
        if "passthrough" in args.targets:
            for transport in args.transports:
                if transport in PASSTHROUGH_TRANSPORTS:
                    bench.passthrough(transport)
        if "gateway" in args.targets:
            for redis in (False, True) if args.redis else (False,):
                for transport in args.transports:
                    bench.gateways(transport, redis)
        result = report(bench, facts, time.monotonic() - started)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
            print(f"JSON written to {args.json}")

    def cleanup() -> None:
        procs.stop_all()
        try:
            bench.flush_shared_redis()
        except BenchError as exc:
            print(f"warning: {exc}", file=sys.stderr)

    return guarded_run(work, args.keep, run, cleanup)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
