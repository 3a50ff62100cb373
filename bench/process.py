#!/usr/bin/env python3
"""The gateway as a process: its cold start, its memory at rest and after work, what a second
uvicorn worker buys, and its memory over many distinct prompts (--soak N); this tree's and,
with --baseline DIR, another commit's, side by side in one run. The gateway is the bench's
(targets.Bench.setup_gateway, the same uvicorn argv and env). Standard library only: run it as
a script, `python bench/process.py`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_complete import preflight
from body_rss import memory
from procs import (
    BENCH_DIR,
    BENCH_KEY,
    LOAD_CPU,
    ROOT,
    SERVER_CPU,
    START_TIMEOUT_S,
    BenchError,
    Processes,
    free_port,
    guarded_run,
    http,
    log_problems,
    log_tail,
    stop_on_signals,
)
from report import machine_facts
from targets import (
    GATEWAY_BODY,
    GATEWAY_TRANSPORTS,
    PROMPT,
    Bench,
    Variant,
    client_env,
    gateway_loop,
)
from wrkrun import WRK_TIMEOUT, parse_wrk, wrk_threads

COUNTED_LUA = BENCH_DIR / "counted.lua"
PATH = "/api/v1/complete"
# The bench's body with a number unique in the run in its prompt (counted.lua fills "@N@").
UNIQUE_BODY = json.dumps({"prompt": f"{PROMPT} @N@"})
SETTLE_S = 3.0  # "at rest": this long after it is ready, or after its last answer
MIB = 1024.0  # /proc reports kB
PINNED = (
    f"taskset: the servers of the cold starts, RSS and soak on CPU {SERVER_CPU}, wrk and this "
    f"script's probes on CPU {LOAD_CPU}; the workers part and the fake provider unpinned"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    formatter = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__.split(";")[0], formatter_class=formatter)
    add = parser.add_argument
    add("--runs", type=int, default=5, help="Measured cold starts per gateway.")
    add("--warmup-requests", type=int, default=2000, help="Requests before the RSS after work.")
    add("--soak", type=int, default=0, metavar="N", help="Unique prompts to send; 0: no soak.")
    add("--connections", type=int, default=64, help="wrk's, for every load.")
    add("--duration", type=float, default=8, help="Measured seconds per --workers run.")
    add("--warmup", type=float, default=2, help="Warm-up seconds before each --workers run.")
    add_gateway_options(add)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.connections < 2 or args.duration <= 0 or args.warmup < 0:
        parser.error("--runs ≥ 1, --connections ≥ 2, --duration > 0, --warmup ≥ 0")
    if args.warmup_requests < args.connections or 0 < args.soak < args.connections:
        parser.error("--warmup-requests and --soak (unless 0) must be ≥ --connections")
    args.options = dict(vars(args))  # as given, for the JSON
    # What targets.Bench and bench_complete.preflight read: one gateway, no Redis.
    args.transports, args.targets, args.endpoints = [args.transport], ["gateway"], ["complete"]
    args.redis = args.shared_redis = args.primary_refused = False
    return args


def add_gateway_options(add: Any) -> None:
    """The options of a script that starts this tree's gateway and, maybe, a baseline's."""
    add("--transport", choices=GATEWAY_TRANSPORTS, default="default")
    add("--baseline", metavar="DIR", help="Another commit's checkout, measured too.")
    add("--no-pin", action="store_true", help="Don't pin processes to CPUs.")
    add("--json", metavar="PATH", help="Write the results as JSON here.")
    add("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    add("--keep", action="store_true", help="Keep the temp dir (logs, SQLite).")


def uvicorn(python: str, port: int, workers: int, root: Path) -> list[str]:
    """The bench's gateway argv (targets.Bench); with workers, a log that says each started."""
    level = "info" if workers > 1 else "warning"
    return [python, "-m", "uvicorn", "failover_site.asgi:application", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers), "--loop", gateway_loop(root),
            "--http", "httptools", "--no-access-log", "--log-level", level,
            "--lifespan", "on"]  # fmt: skip


def name(variant: Variant) -> str:
    return "baseline" if variant.label else "this tree"


def group_cpu_s(pgid: int) -> dict[int, float]:
    """CPU seconds so far of each live process in a process group (uvicorn and its workers)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # a process gone meanwhile
            # After the ")" that ends the name: state ppid pgrp … utime (11) stime (12).
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                ticks = int(fields[11]) + int(fields[12])
                found[int(stat.parent.name)] = ticks / os.sysconf("SC_CLK_TCK")
    return found


class Gateways:
    """Each variant's servers started, timed, loaded and stopped; the figures in `results`."""

    def __init__(self, args: argparse.Namespace, bench: Bench, procs: Processes) -> None:
        self.args, self.bench = args, bench
        self.procs = procs  # pinned (if pinning): the measured servers and wrk beside them
        self.loose = bench.procs  # never pinned: the fake provider, the set-up, the workers
        self.results: dict[str, dict[str, Any]] = {
            name(v): {"root": str(v.root), "commit": commit_of(v.root)} for v in bench.variants
        }
        self.warnings: list[str] = []

    def start(self, variant: Variant, procs: Processes, workers: int = 1) -> tuple[Any, str]:
        """A gateway, and its address once GET /healthz answers 200 (polled every 10 ms)."""
        began, port = time.monotonic(), free_port()
        env = {**variant.env, **client_env(self.args.transport)}
        argv = uvicorn(self.args.python, port, workers, variant.root)
        proc = procs.start(f"gateway{variant.label}-{port}", argv, env, SERVER_CPU,
                           cwd=variant.root)  # fmt: skip
        while True:
            with contextlib.suppress(OSError):
                if http("GET", f"http://127.0.0.1:{port}/healthz", timeout=2)[0] == 200:
                    proc.ready_s = time.monotonic() - began
                    return proc, f"http://127.0.0.1:{port}"
            if proc.poll() is not None or time.monotonic() - began > START_TIMEOUT_S:
                self.stop(proc, procs)
                raise BenchError(f"{proc.bench_name} did not start:\n{log_tail(proc)}")
            time.sleep(0.01)

    def stop(self, proc: Any, procs: Processes) -> None:
        procs.stop(proc)
        if problems := log_problems(proc):
            self.warnings.append(f"{proc.bench_name}: {len(problems)} error lines: {problems[0]}")

    def cold_start(self, variant: Variant) -> tuple[float, int]:
        """Seconds from the spawn to GET /healthz 200, and VmRSS (kB) SETTLE_S later."""
        proc, _ = self.start(variant, self.procs)
        time.sleep(SETTLE_S)
        rss = memory(proc.pid)["VmRSS"]
        self.stop(proc, self.procs)
        return proc.ready_s, rss

    def cold_starts(self) -> None:
        """A priming start per variant (it fills the bytecode and page caches), then --runs."""
        mine = os.sched_getaffinity(0)
        if self.procs.pin:  # the prober on the load's CPU, the server alone on its own
            os.sched_setaffinity(0, {LOAD_CPU})
        try:
            for variant in self.bench.variants:
                self.cold_start(variant)
            for run in range(self.args.runs):
                for variant in self.bench.variants:
                    seconds, rss = self.cold_start(variant)
                    found = self.results[name(variant)].setdefault("cold_runs", [])
                    found.append({"seconds": round(seconds, 4), "rss_kib": rss})
                    print(f"  cold start {run + 1} {name(variant):<9} {seconds:6.3f} s  "
                          f"VmRSS {rss / MIB:6.1f} MiB", flush=True)  # fmt: skip
        finally:
            os.sched_setaffinity(0, mine)
        for out in self.results.values():
            for key, field in (("cold_start_{}_s", "seconds"), ("rest_{}_kib", "rss_kib")):
                values = [c[field] for c in out["cold_runs"]]
                out[key.format("min")] = min(values)
                out[key.format("median")] = statistics.median(values)

    def expect_primary(self, variant: Variant, base: str, proc: Any, when: str) -> None:
        """The bench's request is answered 200 by the fake provider (tier primary), or abort."""
        status, body = http("POST", base + PATH, GATEWAY_BODY)
        with contextlib.suppress(ValueError, AttributeError):
            if status == 200 and json.loads(body).get("tier") == "primary":
                return
        got = f"{status} {body[:400]!r}\n{log_tail(proc)}"
        raise BenchError(f"{name(variant)} {when}: expected 200, tier primary; got {got}")

    def load(self, variant: Variant) -> None:
        """VmRSS after --warmup-requests, then (--soak N) under N unique prompts."""
        proc, base = self.start(variant, self.procs)
        out = self.results[name(variant)]
        try:
            self.expect_primary(variant, base, proc, "before the warm-up")
            count = self.args.warmup_requests
            warm, _ = self.counted(proc, f"warmup{variant.label}", base, GATEWAY_BODY, count)
            if warm["non_2xx"] or warm["socket_errors"] or warm["requests"] < count:
                raise BenchError(f"{name(variant)} warm-up: {warm}\n{log_tail(proc)}")
            time.sleep(SETTLE_S)
            out["after_warmup_kib"] = memory(proc.pid)["VmRSS"]
            self.expect_primary(variant, base, proc, "after the warm-up")
            print(f"  {name(variant)}: {warm['requests']} requests of warm-up, VmRSS "
                  f"{out['after_warmup_kib'] / MIB:.1f} MiB", flush=True)  # fmt: skip
            if self.args.soak:
                self.soak(variant, proc, base, out)
        finally:
            self.stop(proc, self.procs)

    def soak(self, variant: Variant, proc: Any, base: str, out: dict[str, Any]) -> None:
        count = self.args.soak
        print(f"  {name(variant)}: {count:,} unique prompts …", flush=True)
        began = time.monotonic()
        run, samples = self.counted(proc, f"soak{variant.label}", base, UNIQUE_BODY, count)
        seconds = time.monotonic() - began
        time.sleep(SETTLE_S)
        end, hwm = memory(proc.pid)["VmRSS"], memory(proc.pid)["VmHWM"]
        self.expect_primary(variant, base, proc, "after the soak")
        start = out["soak_start_kib"] = out["after_warmup_kib"]
        out.update(soak_peak_kib=max([*samples, end]), soak_end_kib=end, soak_rps=run["rps"])
        out["soak_end_over_start"] = round(end / start, 3)
        out["soak"] = {**run, "seconds": round(seconds, 1), "vmhwm_kib": hwm, "samples": samples}
        if run["non_2xx"] or run["socket_errors"] or run["requests"] < count:
            self.warnings.append(
                f"{name(variant)} soak: {run['requests']} answered of {count}, "
                f"{run['non_2xx']} non-2xx, socket errors {run['socket_errors'] or 0}"
            )

    def counted(
        self, server: Any, label: str, base: str, body: str, count: int
    ) -> tuple[dict[str, Any], list[int]]:
        """wrk until `count` answers (counted.lua), the server's VmRSS sampled every second."""
        threads = wrk_threads(self.args.connections)
        done = self.bench.work / f"{label}.done"
        limit = max(60.0, count / 50)  # wrk's -d (a floor of 50 req/s); ended sooner below
        argv = ["wrk", f"-t{threads}", f"-c{self.args.connections}", f"-d{limit:.0f}s",
                "--timeout", WRK_TIMEOUT, "-s", str(COUNTED_LUA), base + PATH]  # fmt: skip
        env = {**os.environ, "BENCH_BODY": body, "BENCH_KEY": BENCH_KEY, "BENCH_DONE": str(done),
               "BENCH_COUNT": str(count), "BENCH_THREADS": str(threads)}  # fmt: skip
        wrk = self.procs.start(f"wrk-{label}", argv, env, LOAD_CPU)
        samples: list[int] = []
        began = next_sample = time.monotonic()
        try:
            while wrk.poll() is None:
                if time.monotonic() >= next_sample:
                    samples.append(memory(server.pid)["VmRSS"])
                    next_sample += 1
                if done.exists() and len(done.read_text().split()) >= threads:
                    os.kill(wrk.pid, signal.SIGINT)  # every thread has stopped: wrk reports
                    wrk.wait(30)
                elif time.monotonic() - began > limit + 30:
                    raise BenchError(f"wrk ({label}) did not end in {limit + 30:.0f} s")
                time.sleep(0.05)
        finally:
            self.procs.stop(wrk)
        return parse_wrk(Path(wrk.bench_log).read_text()), samples

    def workers(self) -> None:
        """req/s with --workers 1 and 2, nothing pinned; the CPU each gateway process used."""
        for count in (1, 2):
            for variant in self.bench.variants:
                proc, base = self.start(variant, self.loose, count)
                try:
                    if count > 1:
                        wait_workers(proc, count)
                    self.expect_primary(variant, base, proc, f"--workers {count}")
                    cpu, began = group_cpu_s(proc.pid), time.monotonic()
                    run = self.bench.wrk.measure(name(variant), base + PATH, GATEWAY_BODY,
                                        self.args.connections)  # fmt: skip
                    wall, now = time.monotonic() - began, group_cpu_s(proc.pid)
                    cores = sorted([(t - cpu.get(p, 0)) / wall for p, t in now.items()])[::-1]
                    self.expect_primary(variant, base, proc, f"after --workers {count}")
                finally:
                    self.stop(proc, self.loose)
                out = self.results[name(variant)]
                per_process = [round(c, 2) for c in cores]
                out[f"workers_{count}"] = {**asdict(run), "cpu_cores_per_process": per_process}
                out[f"workers_{count}_rps"] = run.rps
                out[f"workers_{count}_cpu_cores"] = round(sum(cores), 2)
                # What the processes made of the CPU they got: a second worker that scales
                # serves as much a core as one, whatever share of the machine it was left.
                out[f"workers_{count}_rps_per_core"] = (
                    round(run.rps / sum(cores), 1) if sum(cores) else None
                )
                if count == 2 and out["workers_1_rps"]:
                    out["workers_2_over_1"] = round(run.rps / out["workers_1_rps"], 3)
                    if out["workers_1_rps_per_core"] and out["workers_2_rps_per_core"]:
                        per_core = out["workers_2_rps_per_core"] / out["workers_1_rps_per_core"]
                        out["workers_2_over_1_per_core"] = round(per_core, 3)
                if run.errors:
                    self.warnings.append(f"{name(variant)} --workers {count}: {run}")
                print(f"  --workers {count} {name(variant):<9} {run.rps:9.1f} req/s  "
                      f"p50 {run.p50_ms:.2f} ms  p99 {run.p99_ms:.2f} ms  "
                      f"CPU {' + '.join(f'{c:.2f}' for c in cores)} cores", flush=True)  # fmt: skip


def wait_workers(proc: Any, count: int) -> None:
    """Until each of `count` workers has logged its start-up (/healthz answering says one has)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while Path(proc.bench_log).read_text(errors="replace").count("startup complete") < count:
        if time.monotonic() > deadline:
            raise BenchError(f"{proc.bench_name}: not all {count} workers up:\n{log_tail(proc)}")
        time.sleep(0.1)


def commit_of(root: Path) -> str:
    argv = ["git", "-C", str(root), "describe", "--always", "--dirty= (with local changes)"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or "unknown"


def table(args: argparse.Namespace, results: dict[str, dict[str, Any]], pin: bool) -> None:
    names = list(results)
    both = len(names) == 2

    def row(label: str, key: str, digits: int = 1, scale: float = 1) -> None:
        values = [None if results[n].get(key) is None else results[n][key] / scale for n in names]
        cells = "".join(f"{'-':>12}" if v is None else f"{v:>12.{digits}f}" for v in values)
        a, b = values[0], values[-1]
        ratio = f"{a / b:>11.3f}" if both and a is not None and b else ""
        print(f"  {label:<42}{cells}{ratio}")

    where = f"server on CPU {SERVER_CPU}, wrk on CPU {LOAD_CPU}" if pin else "not pinned"
    print("\n" + "=" * 78)
    head = "".join(f"{n:>12}" for n in names) + (f"{'tree/base':>11}" if both else "")
    print(f"  {'':<42}{head}")
    print(f"Cold start, s: spawn → GET /healthz 200 (runs: {args.runs}, after a priming start; "
          f"{where})")  # fmt: skip
    row("min", "cold_start_min_s", 3)
    row("median", "cold_start_median_s", 3)
    print(f"RSS, MiB: VmRSS ({where})")
    row(f"at rest, {SETTLE_S:g} s after ready (median)", "rest_median_kib", scale=MIB)
    row(f"after {args.warmup_requests:,} requests, +{SETTLE_S:g} s", "after_warmup_kib", 1, MIB)
    print(f"Workers: req/s at {args.connections} connections, {args.duration:g} s; NOT pinned: "
          f"the gateway, wrk and the fake provider share {os.cpu_count()} CPUs")  # fmt: skip
    for count in (1, 2):
        row(f"--workers {count}", f"workers_{count}_rps")
        row(f"  its CPU, cores (--workers {count})", f"workers_{count}_cpu_cores", 2)
        row(f"  req/s per core of its CPU (--workers {count})", f"workers_{count}_rps_per_core")
    row("ratio 2 / 1", "workers_2_over_1", 2)
    row("ratio 2 / 1, per core of CPU", "workers_2_over_1_per_core", 2)
    if args.soak:
        print(f"Soak: {args.soak:,} unique prompts at {args.connections} connections, "
              f"VmRSS sampled every 1 s, MiB ({where})")  # fmt: skip
        row("start (after the warm-up)", "soak_start_kib", scale=MIB)
        row("peak (sampled)", "soak_peak_kib", scale=MIB)
        row(f"end ({SETTLE_S:g} s after the last answer)", "soak_end_kib", scale=MIB)
        row("ratio end / start", "soak_end_over_start", 3)
        row("req/s during the soak", "soak_rps")
    goals(results)


# The goals (docs/performance.md): (what, the result's key, the goal, lower is better, scale).
GOALS = (
    ("cold start, median, s", "cold_start_median_s", 0.7, True, 1.0),
    ("RSS at rest, MiB", "rest_median_kib", 70.0, True, MIB),
    ("two workers / one", "workers_2_over_1", 1.8, False, 1.0),
    ("soak end / start", "soak_end_over_start", 1.5, True, 1.0),
)


def goals(results: dict[str, dict[str, Any]]) -> None:
    print("Goals")
    for label, out in results.items():
        for what, key, goal, lower, scale in GOALS:
            if out.get(key) is None:
                continue
            value = out[key] / scale
            met = value <= goal if lower else value >= goal
            print(f"  {label:<10} {what} {value:.2f}: {'meets' if met else 'MISSES'} "
                  f"{'≤' if lower else '≥'} {goal:g}")  # fmt: skip


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        pin = preflight(args)  # wrk, the interpreter, the pinning, the baseline's imports
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop_on_signals()
    work = Path(tempfile.mkdtemp(prefix="bench-process-"))
    procs, loose = Processes(pin, work), Processes(False, work)
    started = time.monotonic()

    def run() -> None:
        bench = Bench(args, loose, work)
        for variant in bench.variants:
            # Bytecode cached, as a deployment has it, but in the temp dir (not in the
            # checkouts), one per variant: the environment may say not to write any.
            variant.env.pop("PYTHONDONTWRITEBYTECODE", None)
            variant.env["PYTHONPYCACHEPREFIX"] = str(work / f"pycache{variant.label}")
            bench.setup_gateway(variant)
        gateways = Gateways(args, bench, procs)
        facts = machine_facts(args.python, pin)
        facts["pinning"] = PINNED if pin else "none"
        print(f"process: {' vs '.join(gateways.results)}; transport {args.transport}", flush=True)
        gateways.cold_starts()
        for variant in bench.variants:
            gateways.load(variant)
        gateways.workers()
        table(args, gateways.results, pin)
        for warning in gateways.warnings:
            print(f"warning: {warning}")
        if args.json:
            config = {**args.options, "elapsed_s": round(time.monotonic() - started, 1)}
            result = {"machine": facts, "config": config, "gateways": gateways.results,
                      "warnings": gateways.warnings}  # fmt: skip
            Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
            print(f"JSON written to {args.json}")

    def cleanup() -> None:
        procs.stop_all()
        loose.stop_all()

    return guarded_run(work, args.keep, run, cleanup)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
