"""The processes a bench run starts, and the small HTTP helpers it probes them with.

Every process is started in a session (process group) of its own and stopped by the PID this run
got for it: SIGTERM, then SIGKILL. Nothing is ever stopped by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

SERVER_CPU = 0
LOAD_CPU = 1  # wrk and the upstream (when the upstream is not the measured server)

START_TIMEOUT_S = 40
STOP_TIMEOUT_S = 15
SETUP_TIMEOUT_S = 180

# No proxies from the environment for our own probes of 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BenchError(Exception):
    """A condition that makes the measurement meaningless: stop and say why."""


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

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        cpu: int | None,
        cwd: Path = ROOT,
    ) -> Any:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                self.argv(argv, cpu),
                cwd=cwd,
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
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        cpu: int | None,
        timeout: float,
        cwd: Path = ROOT,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion (bounded), output captured; stopped like the servers if cut short."""
        proc = subprocess.Popen(
            self.argv(argv, cpu),
            cwd=cwd,
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


def log_problems(proc: Any) -> list[str]:
    """The error lines (tracebacks, ERROR records) in a server's log."""
    try:
        text = Path(proc.bench_log).read_text(errors="replace")
    except OSError:
        return []
    return [
        line
        for line in text.splitlines()
        if "Traceback" in line or " ERROR " in line or line.startswith("ERROR")
    ]


# The client key every request to a gateway carries (its app is made by targets.setup_gateway;
# a tree without client keys ignores the header).
BENCH_KEY = "fgw_bench-client-key-000000000000000000000000000"


def http(method: str, url: str, body: str | None = None, timeout: float = 10) -> tuple[int, bytes]:
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {BENCH_KEY}")
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


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_signals() -> None:
    """Ctrl-C, kill and a closed terminal all end in a run's cleanup (SIGINT explicitly: a
    shell that starts a script in the background would otherwise leave it ignored)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)


def guarded_run(
    work: Path, keep: bool, run: Callable[[], None], cleanup: Callable[[], None]
) -> int:
    """`run()`, then `cleanup()` whatever happened, then the work dir removed unless `keep` or
    the run failed. The exit status: 0, 1 (a BenchError: aborted) or 130 (interrupted)."""
    status = 0
    try:
        run()
    except BenchError as exc:
        print(f"\nABORTED: {exc}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print("\ninterrupted: stopping what was started", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleanup()
        if keep or status not in (0, 130):
            print(f"logs and data kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status
