#!/usr/bin/env python3
"""Throughput and latency of `POST /api/v1/complete`, against the floors under it.

    .venv/bin/python bench/bench_complete.py                 # defaults: ~3 minutes
    .venv/bin/python bench/bench_complete.py --duration 4 --connections 16 --targets gateway
    .venv/bin/python bench/bench_complete.py --redis --json /tmp/bench.json

One run measures requests/s and p50/p99 latency with wrk at each connection count for:

  direct       the fake provider itself (`manage.py fakeprovider`), hit with the exact POST the
               gateway sends it (Ollama `/api/chat`, `stream: false`);
  passthrough  bench/passthrough.py: raw ASGI, one pooled httpx.AsyncClient, forwarding the body
               to the fake provider (per transport: httpx's own pool, aiohttp's under httpx);
  gateway      the platform (`uvicorn failover_site.asgi:application`), embedded mode, DEBUG=false,
               one Ollama provider pointing at the fake provider (per transport);
  gateway+redis  the same with REDIS_URL (only with --redis; db 12, flushed before and after).

Every server is one uvicorn process with uvloop + httptools, no access log. With taskset (and
2+ CPUs) the measured server runs on CPU 0, wrk and the fake provider on CPU 1 (for `direct`
the fake provider is the measured server: it gets CPU 0 alone). --no-pin turns that off.

Standard library only: run it with any Python 3.11+; the servers run with --python (default the
project's .venv). Every process it starts is stopped at the end, also on Ctrl-C or an error.
Needs wrk (`apt-get install -y wrk`). See bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
LUA_SCRIPT = BENCH_DIR / "post.lua"

MODEL = "llama3.1:8b"
PROMPT = "Say hello."
PROVIDER_NAME = "bench-ollama"
# The frontends' request, and what the gateway's Ollama adapter sends upstream for it
# (providers/adapters/ollama.py: json.dumps of model, messages, stream=False).
GATEWAY_BODY = json.dumps({"prompt": PROMPT})
UPSTREAM_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": False}
)
REDIS_URL = "redis://127.0.0.1:6379/12"

# The bar: 20 × LiteLLM's 75–92 req/s on one core, and half of the bare proxy.
LITELLM_RPS = (75, 92)
BAR_FACTOR = 20
BAR_RPS = BAR_FACTOR * LITELLM_RPS[1]  # 1,840
BAR_PASSTHROUGH = 0.5

SERVER_CPU = 0
LOAD_CPU = 1  # wrk and the upstream (when the upstream is not the measured server)

WARMUP_S = 2
WRK_TIMEOUT = "5s"
START_TIMEOUT_S = 40
STOP_TIMEOUT_S = 15
SETUP_TIMEOUT_S = 180

# No proxies from the environment for our own probes of 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BenchError(Exception):
    """A condition that makes the measurement meaningless: stop and say why."""


# --------------------------------------------------------------------------- processes


class Processes:
    """Every process this run starts, each in a session (process group) of its own, so a Ctrl-C
    in the terminal reaches only this script, which then stops them (by the PIDs it started)."""

    def __init__(self, pin: bool, log_dir: Path) -> None:
        self.pin = pin
        self.log_dir = log_dir
        self.running: dict[int, tuple[str, subprocess.Popen[Any]]] = {}

    def argv(self, argv: list[str], cpu: int | None) -> list[str]:
        if self.pin and cpu is not None:
            return ["taskset", "-c", str(cpu), *argv]  # taskset execs: same PID
        return argv

    def start(self, name: str, argv: list[str], env: dict[str, str], cpu: int | None) -> Any:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                self.argv(argv, cpu),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.bench_name = name  # type: ignore[attr-defined]
        proc.bench_log = log_path  # type: ignore[attr-defined]
        self.running[proc.pid] = (name, proc)
        return proc

    def run(
        self, name: str, argv: list[str], env: dict[str, str], cpu: int | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion (bounded), output captured; stopped like the servers if cut short."""
        proc = subprocess.Popen(
            self.argv(argv, cpu),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.running[proc.pid] = (name, proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(proc)
            raise BenchError(f"{name} did not finish within {timeout:.0f} s") from None
        finally:
            if proc.poll() is not None:
                self.running.pop(proc.pid, None)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def stop(self, proc: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the process group this run created for it (its PID), then SIGKILL."""
        try:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            else:
                _signal_group(proc.pid, signal.SIGKILL)  # anything it left behind in its group
        finally:
            self.running.pop(proc.pid, None)

    def stop_all(self) -> None:
        for _, proc in reversed(list(self.running.values())):
            self.stop(proc)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(proc: Any, lines: int = 25) -> str:
    try:
        text = Path(proc.bench_log).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    | " + line for line in text.splitlines()[-lines:])


def http(method: str, url: str, body: str | None = None, timeout: float = 10) -> tuple[int, bytes]:
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with _HTTP.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(proc: Any, url: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(
                f"{proc.bench_name} exited with {proc.returncode} while starting:\n{log_tail(proc)}"
            )
        try:
            status, _ = http("GET", url, timeout=2)
            if status == 200:
                return
            last = f"HTTP {status}"
        except OSError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise BenchError(f"{proc.bench_name} not ready at {url} after {timeout} s ({last})")


# --------------------------------------------------------------------------- wrk


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


class Wrk:
    def __init__(self, procs: Processes, duration: float, warmup: float) -> None:
        self.procs = procs
        self.duration = duration
        self.warmup = warmup

    def _once(self, url: str, body: str, connections: int, seconds: float) -> dict[str, Any]:
        threads = min(2 if connections >= 64 else 1, connections)
        argv = [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            WRK_TIMEOUT,
            "--latency",
            "-s",
            str(LUA_SCRIPT),
            url,
        ]
        env = {**os.environ, "BENCH_BODY": body}
        done = self.procs.run("wrk", argv, env, LOAD_CPU, timeout=seconds + 30)
        if done.returncode != 0:
            raise BenchError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
        parsed = parse_wrk(done.stdout)
        parsed["threads"] = threads
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


# --------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args: argparse.Namespace, procs: Processes, work: Path) -> None:
        self.args = args
        self.procs = procs
        self.work = work
        self.python = args.python
        self.wrk = Wrk(procs, args.duration, args.warmup)
        self.runs: list[Run] = []
        self.warnings: list[str] = []
        self.profiles: dict[str, Any] = {}
        self.data_dir = work / "data"
        self.data_dir.mkdir()
        self.env = self._base_env()
        self.upstream: Any = None
        self.upstream_url = ""
        self.gateway_ready = False
        self.redis_used = False

    def _base_env(self) -> dict[str, str]:
        """Production-like and embedded: no DATABASE_URL/REDIS_URL, no .env, DEBUG=false."""
        drop = {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PROVIDER_HTTP_CLIENT"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(
            ENV_FILE="",
            DATA_DIR=str(self.data_dir),
            STATIC_ROOT=str(self.data_dir / "static"),
            DEBUG="false",
            SECRET_KEY=secrets.token_urlsafe(50),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            SECURE_SSL_REDIRECT="false",
            DJANGO_SETTINGS_MODULE="failover_site.settings",
            PYTHONUNBUFFERED="1",
        )
        return env

    def _uvicorn(self, app: str, port: int, extra: list[str] | None = None) -> list[str]:
        return [
            self.python,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
            *(extra or []),
        ]

    def _start_fake(self, name: str, cpu: int) -> tuple[Any, str]:
        port = free_port()
        argv = [self.python, "manage.py", "fakeprovider", "--port", str(port), "--model", MODEL]
        proc = self.procs.start(name, argv, self.env, cpu)
        url = f"http://127.0.0.1:{port}"
        wait_ready(proc, f"{url}/api/tags")
        status, body = http("POST", f"{url}/api/chat", UPSTREAM_BODY)
        if status != 200 or b'"content"' not in body:
            raise BenchError(f"the fake provider answered {status}: {body[:300]!r}")
        return proc, url

    def _sweep(self, target: str, url: str, body: str) -> list[Run]:
        runs = []
        for connections in self.args.connections:
            run = self.wrk.measure(target, url, body, connections)
            print(
                f"  {target:<24} c={connections:<3} {run.rps:>9.1f} req/s  "
                f"p50 {run.p50_ms:7.2f} ms  p99 {run.p99_ms:7.2f} ms"
                + (f"  ERRORS {run.non_2xx} non-2xx {run.socket_errors}" if run.errors else ""),
                flush=True,
            )
            if run.errors:
                self.warnings.append(
                    f"{target} c={connections}: {run.non_2xx} non-2xx, socket errors "
                    f"{run.socket_errors or 0} (of {run.requests} requests)"
                )
            runs.append(run)
        self.runs.extend(runs)
        return runs

    # ---- targets

    def direct(self) -> None:
        # The upstream is the measured server here: it gets CPU 0 to itself.
        proc, url = self._start_fake("upstream-direct", SERVER_CPU)
        try:
            self._sweep("direct", f"{url}/api/chat", UPSTREAM_BODY)
        finally:
            self.procs.stop(proc)

    def ensure_upstream(self) -> None:
        if self.upstream is None:
            self.upstream, self.upstream_url = self._start_fake("upstream", LOAD_CPU)

    def passthrough(self, transport: str) -> None:
        self.ensure_upstream()
        port = free_port()
        env = {**self.env, "BENCH_UPSTREAM": self.upstream_url, "PROVIDER_HTTP_CLIENT": transport}
        argv = self._uvicorn(
            "passthrough:app", port, ["--app-dir", str(BENCH_DIR), "--lifespan", "on"]
        )
        proc = self.procs.start(f"passthrough-{transport}", argv, env, SERVER_CPU)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(proc, f"{url}/")
            status, body = http("POST", f"{url}/api/chat", UPSTREAM_BODY)
            if status != 200:
                raise BenchError(f"passthrough[{transport}] answered {status}: {body[:300]!r}")
            self._sweep(f"passthrough[{transport}]", f"{url}/api/chat", UPSTREAM_BODY)
        finally:
            self.procs.stop(proc)

    def setup_gateway(self) -> None:
        """migrate + bootstrap in the temp DATA_DIR, and the one provider: the fake upstream."""
        if self.gateway_ready:
            return
        self.ensure_upstream()
        env = {**self.env, "BENCH_UPSTREAM": self.upstream_url}
        create = (
            "import os; from providers.models import Provider; "
            f"Provider.objects.update_or_create(name={PROVIDER_NAME!r}, defaults=dict("
            f"kind='ollama', base_url=os.environ['BENCH_UPSTREAM'], model={MODEL!r}, "
            "is_local=True, priority=10, enabled=True)); "
            "print('providers:', list(Provider.objects.filter(enabled=True)"
            ".values_list('name', 'base_url', 'priority')))"
        )
        for name, argv in (
            ("migrate", [self.python, "manage.py", "migrate", "--noinput"]),
            ("bootstrap", [self.python, "manage.py", "bootstrap"]),
            ("provider", [self.python, "manage.py", "shell", "-c", create]),
        ):
            done = self.procs.run(name, argv, env, None, timeout=SETUP_TIMEOUT_S)
            if done.returncode != 0:
                raise BenchError(f"manage.py {name} failed:\n{done.stdout}\n{done.stderr}")
        self.gateway_ready = True

    def gateway(self, transport: str, redis: bool) -> None:
        self.setup_gateway()
        target = f"gateway{'+redis' if redis else ''}[{transport}]"
        env = {**self.env, "PROVIDER_HTTP_CLIENT": transport}
        if redis:
            env["REDIS_URL"] = REDIS_URL
            self.flush_redis()
        port = free_port()
        argv = self._uvicorn("failover_site.asgi:application", port, ["--lifespan", "on"])
        proc = self.procs.start(target.replace("[", "-").rstrip("]"), argv, env, SERVER_CPU)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(proc, f"{base}/healthz")
            url = f"{base}/api/v1/complete"
            self._expect_primary(target, url, proc, "before measuring")
            self._sweep(target, url, GATEWAY_BODY)
            self._expect_primary(target, url, proc, "after measuring")
            if self.args.py_spy:
                self.profile(target, url, proc)
        finally:
            self.procs.stop(proc)
            if redis:
                self.flush_redis()
        problems = [
            line
            for line in Path(proc.bench_log).read_text(errors="replace").splitlines()
            if "Traceback" in line or " ERROR " in line or line.startswith("ERROR")
        ]
        if problems:
            self.warnings.append(
                f"{target}: {len(problems)} error lines in its log, first: {problems[0]}"
            )

    def _expect_primary(self, target: str, url: str, proc: Any, when: str) -> None:
        status, body = http("POST", url, GATEWAY_BODY)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        if status != 200 or answer.get("tier") != "primary":
            raise BenchError(
                f"{target} {when}: expected 200 with tier 'primary', got {status}: "
                f"{body[:400]!r}\n  (the cascade did not reach the fake provider, so this "
                f"would not measure the proxy path)\n{log_tail(proc)}"
            )

    def flush_redis(self) -> None:
        self.redis_used = True
        code = f"import redis; redis.Redis.from_url({REDIS_URL!r}, socket_timeout=3).flushdb()"
        done = self.procs.run("redis-flush", [self.python, "-c", code], self.env, None, timeout=20)
        if done.returncode != 0:
            raise BenchError(f"cannot flush {REDIS_URL}: {done.stderr.strip().splitlines()[-1:]}")

    # ---- py-spy (optional)

    def profile(self, target: str, url: str, proc: Any) -> None:
        py_spy = shutil.which(
            "py-spy", path=f"{Path(self.python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        )
        if py_spy is None:
            self.warnings.append(
                f"--py-spy: py-spy not found (install: {self.python} -m pip install py-spy)"
            )
            return
        seconds = self.args.py_spy_seconds
        connections = self.args.py_spy_connections
        raw = self.work / f"py-spy-{target}.txt"
        threads = min(2 if connections >= 64 else 1, connections)
        load = self.procs.start(
            "wrk-profile",
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                f"-d{seconds + 4:g}s",
                "--timeout",
                WRK_TIMEOUT,
                "-s",
                str(LUA_SCRIPT),
                url,
            ],
            {**os.environ, "BENCH_BODY": GATEWAY_BODY},
            LOAD_CPU,
        )
        try:
            time.sleep(1.5)
            done = self.procs.run(
                "py-spy",
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--duration",
                    str(max(1, round(seconds))),
                    "--rate",
                    "200",
                    # Only samples holding the GIL: what the one busy core spends its time on
                    # (threads parked in a pool or in epoll don't count).
                    "--gil",
                    "--threads",
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                ],
                os.environ.copy(),
                LOAD_CPU,
                timeout=seconds + 30,
            )
        finally:
            self.procs.stop(load)
        if done.returncode != 0 or not raw.exists():
            self.warnings.append(
                f"py-spy failed on {target}: {(done.stderr or done.stdout)[-300:]}"
            )
            return
        self.profiles[target] = summarize_profile(raw.read_text(errors="replace"))
        self.profiles[target]["connections"] = connections
        self.profiles[target]["seconds"] = seconds


_PROFILE_ROOTS = frozenset(
    {"Runner.run (asyncio/runners.py)", "_worker (concurrent/futures/thread.py)"}
)


def summarize_profile(collapsed: str, top: int = 10) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        for frame in frames:
            if frame.startswith("thread "):
                threads[frame] += n
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        # Inclusive shares below the event loop / thread pool: the frames above them (uvicorn's
        # start-up, Thread._bootstrap) are in nearly every sample and say nothing.
        roots = [i for i, frame in enumerate(frames) if frame in _PROFILE_ROOTS]
        for frame in set(frames[roots[-1] + 1 :] if roots else frames):
            inclusive[frame] += n

    def rows(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": fn, "samples": n, "pct": round(100 * n / total, 1)}
            for fn, n in counter.most_common(top)
        ]

    main_thread = threads.most_common(1)[0][1] if threads else total
    return {
        "samples": total,
        "threads_seen": len(threads),
        "main_thread_pct": round(100 * main_thread / total, 1) if total else None,
        "self": rows(own),
        "inclusive": rows(inclusive),
    }


# --------------------------------------------------------------------------- reporting


def machine_facts(python: str, pin: bool) -> dict[str, Any]:
    probe = (
        "import json, sys, importlib.metadata as m\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        "names = ('uvloop', 'httptools', 'uvicorn', 'httpx', 'aiohttp',"
        " 'Django', 'redis', 'hiredis', 'sniffio')\n"
        "print(json.dumps({'python': sys.version.split()[0], **{n: v(n) for n in names}}))"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    packages = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr}
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, timeout=10).stdout.strip()
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
        "server_python": packages.pop("python", None),
        "packages": packages,
        "uvloop_present": bool(packages.get("uvloop")),
        "wrk": (wrk_version.stdout + wrk_version.stderr).strip().splitlines()[0:1],
        "pinning": (
            f"taskset: measured server on CPU {SERVER_CPU}, wrk + upstream on CPU {LOAD_CPU} "
            f"(direct: the upstream is the measured server, on CPU {SERVER_CPU})"
            if pin
            else "none"
        ),
    }


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_ms(value: float) -> str:
    return f"{value:.2f}" if value == value else "n/a"


def report(bench: Bench, facts: dict[str, Any], elapsed: float) -> dict[str, Any]:
    args = bench.args
    print()
    print("=" * 78)
    print("Machine")
    cpu = facts["cpu_model"] or "cpu model unknown"
    print(f"  nproc {facts['nproc']}  ({cpu}), kernel {facts['kernel']}")
    pk = facts["packages"]
    print(
        f"  server Python {facts['server_python']}; uvloop {pk.get('uvloop') or 'ABSENT'}, "
        f"httptools {pk.get('httptools')}, uvicorn {pk.get('uvicorn')}, httpx {pk.get('httpx')}, "
        f"aiohttp {pk.get('aiohttp')}, "
        f"Django {pk.get('Django')}, sniffio {pk.get('sniffio') or 'absent'}"
    )
    print(f"  {' '.join(facts['wrk'])}; pinning: {facts['pinning']}")
    print(f"  load average at start {', '.join(f'{x:.2f}' for x in facts['loadavg_at_start'])}")
    print(
        f"  wrk: {args.duration:g} s measured after {args.warmup:g} s warm-up per run, "
        f"1 thread (2 at 64 connections), timeout {WRK_TIMEOUT}; total wall time {elapsed:.0f} s"
    )

    print()
    print("Results")
    header = (
        f"  {'target':<24} {'conns':>5} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'requests':>9} {'non-2xx':>8} {'sock err':>8}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    last = None
    for run in bench.runs:
        if last is not None and run.target != last:
            print()
        last = run.target
        print(
            f"  {run.target:<24} {run.connections:>5} {run.rps:>10.1f} {fmt_ms(run.p50_ms):>8} "
            f"{fmt_ms(run.p99_ms):>8} {run.requests:>9} {run.non_2xx:>8} "
            f"{sum(run.socket_errors.values()):>8}"
        )

    by = {(r.target, r.connections): r for r in bench.runs}
    ratios: dict[str, Any] = {}
    bar: dict[str, Any] = {}
    gateways = sorted(
        {r.target for r in bench.runs if r.target.startswith("gateway")},
        key=[r.target for r in bench.runs].index,
    )
    if gateways:
        print()
        print("Ratios (throughput; same transport, same connection count)")
        print(
            f"  {'gateway':<24} {'conns':>5} {'gw req/s':>9} {'pt req/s':>9} {'gw/pt':>6} "
            f"{'direct':>9} {'gw/direct':>9}"
        )
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            rows = []
            for c in args.connections:
                gw = by.get((target, c))
                if gw is None:
                    continue
                pt = by.get((f"passthrough[{transport}]", c))
                dr = by.get(("direct", c))
                row = {
                    "connections": c,
                    "gateway_rps": gw.rps,
                    "passthrough_rps": pt.rps if pt else None,
                    "direct_rps": dr.rps if dr else None,
                    "gateway_over_passthrough": round(gw.rps / pt.rps, 3)
                    if pt and pt.rps
                    else None,
                    "gateway_over_direct": round(gw.rps / dr.rps, 3) if dr and dr.rps else None,
                }
                rows.append(row)
                gw_pt, gw_dr = row["gateway_over_passthrough"], row["gateway_over_direct"]
                print(
                    f"  {target:<24} {c:>5} {gw.rps:>9.1f} "
                    f"{_num(pt.rps if pt else None, 1):>9} {_num(gw_pt, 2):>6} "
                    f"{_num(dr.rps if dr else None, 1):>9} {_num(gw_dr, 3):>9}"
                )
            ratios[target] = {"throughput": rows}

        print()
        print("Added latency at 1 connection (p50; gateway − direct, and gateway − passthrough)")
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            gw, dr, pt = (
                by.get((target, 1)),
                by.get(("direct", 1)),
                by.get((f"passthrough[{transport}]", 1)),
            )
            if gw is None:
                print(f"  {target:<24} (not measured at 1 connection)")
                continue
            added = round(gw.p50_ms - dr.p50_ms, 3) if dr else None
            over_pt = round(gw.p50_ms - pt.p50_ms, 3) if pt else None
            ratios[target]["added_p50_ms_at_1"] = added
            ratios[target]["added_p50_ms_over_passthrough_at_1"] = over_pt
            print(
                f"  {target:<24} gateway p50 {gw.p50_ms:.2f} ms; "
                + (
                    f"direct {dr.p50_ms:.2f} ms → added {added:.2f} ms; "
                    if dr
                    else "direct not measured; "
                )
                + (
                    f"passthrough {pt.p50_ms:.2f} ms → added {over_pt:.2f} ms"
                    if pt
                    else "passthrough not measured"
                )
            )

        print()
        print(
            f"The bar: ≥ {BAR_FACTOR} × LiteLLM's {LITELLM_RPS[0]}–{LITELLM_RPS[1]} req/s "
            f"on one core (i.e. ≥ {BAR_RPS:,} req/s), and ≥ {BAR_PASSTHROUGH} × passthrough"
        )
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            runs = [by[(target, c)] for c in args.connections if (target, c) in by]
            peak = max(runs, key=lambda r: r.rps)
            per_conn = []
            for run in runs:
                pt = by.get((f"passthrough[{transport}]", run.connections))
                share = run.rps / pt.rps if pt and pt.rps else None
                per_conn.append(
                    {
                        "connections": run.connections,
                        "rps": run.rps,
                        "meets_rps_bar": run.rps >= BAR_RPS,
                        "x_litellm_92": round(run.rps / LITELLM_RPS[1], 1),
                        "passthrough_share": round(share, 3) if share is not None else None,
                        "meets_passthrough_bar": share >= BAR_PASSTHROUGH
                        if share is not None
                        else None,
                    }
                )
            bar[target] = {
                "peak_rps": peak.rps,
                "peak_connections": peak.connections,
                "meets_rps_bar_at_peak": peak.rps >= BAR_RPS,
                "per_connections": per_conn,
            }
            print(
                f"  {target:<24} peak {peak.rps:,.0f} req/s at c={peak.connections} = "
                f"{peak.rps / LITELLM_RPS[1]:.1f}× LiteLLM's 92 "
                f"({peak.rps / LITELLM_RPS[0]:.1f}× its 75) "
                f"→ {'MEETS' if peak.rps >= BAR_RPS else 'BELOW'} the {BAR_RPS:,} req/s bar"
            )
            for row in per_conn:
                share = row["passthrough_share"]
                print(
                    f"  {'':<24} c={row['connections']:<3} {row['rps']:>8,.0f} req/s "
                    f"{'≥' if row['meets_rps_bar'] else '<'} {BAR_RPS:,}; "
                    + (
                        f"{share:.2f} × passthrough "
                        f"{'≥' if share >= BAR_PASSTHROUGH else '<'} {BAR_PASSTHROUGH}"
                        if share is not None
                        else "passthrough not measured"
                    )
                )

    if bench.profiles:
        print()
        for target, prof in bench.profiles.items():
            print(
                f"py-spy on {target}: {prof['seconds']} s at c={prof['connections']}, "
                f"{prof['samples']} samples holding the GIL, {prof['threads_seen']} threads seen, "
                f"{prof['main_thread_pct']}% on the busiest (Python frames only: time inside C "
                f"code such as uvloop is charged to the Python frame that called it)"
            )
            print("  top self:")
            for row in prof["self"]:
                print(f"    {row['pct']:5.1f}%  {row['function']}")
            print("  top inclusive (below the event loop and the thread pool):")
            for row in prof["inclusive"]:
                print(f"    {row['pct']:5.1f}%  {row['function']}")

    print()
    if bench.warnings:
        print("Warnings")
        for warning in bench.warnings:
            print(f"  - {warning}")
    else:
        print("No errors: every measured response was 2xx and no socket errors.")

    return {
        "machine": facts,
        "config": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "connections": args.connections,
            "targets": args.targets,
            "transports": args.transports,
            "redis": args.redis,
            "pin": not args.no_pin,
            "model": MODEL,
            "gateway_body": GATEWAY_BODY,
            "upstream_body": UPSTREAM_BODY,
            "elapsed_s": round(elapsed, 1),
        },
        "runs": [asdict(r) for r in bench.runs],
        "ratios": ratios,
        "bar": {
            "rps": BAR_RPS,
            "passthrough_share": BAR_PASSTHROUGH,
            "litellm_rps_one_core": list(LITELLM_RPS),
            "gateways": bar,
        },
        "profiles": bench.profiles,
        "warnings": bench.warnings,
    }


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark POST /api/v1/complete against the fake provider and a bare proxy.",
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
        default="direct,passthrough,gateway",
        help="Any of direct, passthrough, gateway.",
    )
    parser.add_argument("--transports", default="httpx,aiohttp", help="Any of httpx, aiohttp.")
    parser.add_argument(
        "--redis", action="store_true", help=f"Also the gateway on Redis ({REDIS_URL})."
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
    if bad := set(args.targets) - {"direct", "passthrough", "gateway"}:
        parser.error(f"--targets: unknown {', '.join(sorted(bad))}")
    if bad := set(args.transports) - {"httpx", "aiohttp"}:
        parser.error(f"--transports: unknown {', '.join(sorted(bad))}")
    if args.duration <= 0 or args.warmup < 0:
        parser.error("--duration must be > 0 and --warmup ≥ 0")
    return args


def preflight(args: argparse.Namespace) -> bool:
    """Refuse to start without what the run needs; returns whether to pin."""
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed. Install it with:  sudo apt-get install -y wrk")
    if not Path(args.python).exists():
        raise BenchError(f"--python {args.python} does not exist (make install creates .venv)")
    if "gateway" in args.targets and args.redis:
        try:
            with socket.create_connection(("127.0.0.1", 6379), timeout=2):
                pass
        except OSError as exc:
            raise BenchError(f"--redis: nothing listens on 127.0.0.1:6379 ({exc})") from None
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


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        pin = preflight(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Ctrl-C, kill and a closed terminal all end in the same cleanup (SIGINT explicitly: a shell
    # that starts this in the background would otherwise leave it ignored).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)

    per_run = args.warmup + args.duration + 0.3
    servers = ("direct" in args.targets) + len(args.transports) * (
        ("passthrough" in args.targets) + ("gateway" in args.targets) * (1 + args.redis)
    )
    estimate = servers * len(args.connections) * per_run + 8 * servers + 15
    print(
        f"bench_complete: targets {','.join(args.targets)}; transports {','.join(args.transports)}"
        f"{'; +redis' if args.redis else ''}; connections {','.join(map(str, args.connections))}; "
        f"{args.duration:g} s per run (+{args.warmup:g} s warm-up); about {estimate / 60:.1f} min",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="bench-complete-"))
    procs = Processes(pin, work)
    bench = Bench(args, procs, work)
    started = time.monotonic()
    status = 0
    try:
        facts = machine_facts(args.python, pin)
        if "direct" in args.targets:
            bench.direct()
        if "passthrough" in args.targets:
            for transport in args.transports:
                bench.passthrough(transport)
        if "gateway" in args.targets:
            for redis in (False, True) if args.redis else (False,):
                for transport in args.transports:
                    bench.gateway(transport, redis)
        result = report(bench, facts, time.monotonic() - started)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
            print(f"JSON written to {args.json}")
    except BenchError as exc:
        print(f"\nABORTED: {exc}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print("\ninterrupted: stopping what was started", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        if bench.redis_used:
            try:
                bench.flush_redis()
            except BenchError as exc:
                print(f"warning: {exc}", file=sys.stderr)
            procs.stop_all()
        if args.keep or status not in (0, 130):
            print(f"logs and data kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
