"""The gateway a drill starts itself: a temporary DATA_DIR (SQLite), the drill's set-up
(`setup.py`: the migrations, the demo configuration pointed at the drill's fake providers), one
fake provider per demo provider (`manage.py fakeprovider` in a process of its own, so each can
be faulted alone), and the gateway under uvicorn in one or more serving processes. With several
processes, or when asked, Redis: a private `redis-server` on a free loopback port, which the
drill can kill and start again.

Every process is started in a session of its own and stopped by the PID it got (SIGTERM, then
SIGKILL), never by name, as bench/procs.py does for the benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx

from devtools.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 40.0
STOP_TIMEOUT_S = 20.0
SETUP_TIMEOUT_S = 180.0
SECONDARY_KEY = "sk-drill-" + "0" * 24
# Dropped from the environment the drill was started with: the embedded gateway has its own.
_NOT_INHERITED = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "PROMETHEUS_MULTIPROC_DIR",
    "BACKGROUND_JOBS",
)


class DrillSetupError(RuntimeError):
    """The embedded gateway could not be started: what failed and its output."""


def _stop(process: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to the process group it was started in (its PID), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


class RedisServer:
    """A private redis-server (no persistence) on a loopback port, stopped and started again on
    the same port."""

    def __init__(self, work: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise DrillSetupError("redis-server is not on the PATH (needed for Redis)")
        self.binary, self.work, self.port = binary, work, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process is not None:
            return
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.work)]  # fmt: skip
        with open(self.work / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise DrillSetupError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """As a crash would: SIGKILL, no goodbye."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(5)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None


class EmbeddedSite:
    """The drill's own gateway, fakes and (maybe) Redis, for as long as it is started."""

    def __init__(
        self,
        *,
        processes: int = 1,
        redis: bool = False,
        policy: dict[str, Any] | None = None,
        provider_changes: dict[str, dict[str, Any]] | None = None,
        keep: bool = False,
    ) -> None:
        self.processes_wanted = max(1, processes)
        self.use_redis = redis or processes > 1
        self.policy = policy or {}
        self.provider_changes = provider_changes or {}
        self.keep = keep
        self.work = Path(tempfile.mkdtemp(prefix="failover-drill-"))
        self.fakes: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        self.redis: RedisServer | None = None
        self.gateways: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        self.key = ""
        self.roles: dict[str, str] = {}
        self.env = self._env()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        env.update(
            ENV_FILE="",
            DATA_DIR=str(self.work / "data"),
            STATIC_ROOT=str(self.work / "static"),
            DEBUG="false",
            SECRET_KEY=secrets.token_urlsafe(50),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            SECURE_SSL_REDIRECT="false",
            OUTBOUND_ALLOW="loopback",  # the fake providers are on this machine
            DJANGO_SETTINGS_MODULE="failover_site.settings",
            PYTHONUNBUFFERED="1",
            BACKGROUND_JOBS="inprocess",
            CELERY_BROKER_URL="",
            LOG_LEVEL="WARNING",
            OPENAI_API_KEY=SECONDARY_KEY,
            SECRET_DESTINATIONS="OPENAI_API_KEY=https://api.openai.com",
        )
        (self.work / "data").mkdir()
        return env

    @property
    def fake_urls(self) -> dict[str, str]:
        return {role: url for role, (_, url) in self.fakes.items()}

    def _start_fake(self, role: str, *options: str) -> None:
        """A fake provider in a process of its own (`manage.py fakeprovider`): the load's
        process is not the upstream's."""
        port = free_port()
        argv = [sys.executable, str(ROOT / "manage.py"), "fakeprovider", "--port", str(port),
                *options]  # fmt: skip
        with open(self.work / f"fake-{role}.log", "ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.fakes[role] = (process, f"http://127.0.0.1:{port}")

    def _wait_fakes(self) -> None:
        for role, (process, url) in self.fakes.items():
            self._wait_ready(process, f"{url}/_control/stats", f"the {role}'s fake provider")

    def start(self) -> EmbeddedSite:
        try:
            self._start_fake(
                "primary", "--model", "llama3.1:8b", "--text", "Hello from the primary."
            )
            self._start_fake(
                "secondary", "--model", "gpt-4o-mini", "--api-key", SECONDARY_KEY,
                "--text", "Hello from the secondary.",
            )  # fmt: skip
            self._wait_fakes()
            # The demo's secondary is moved onto its fake on this machine: its key may go there.
            self.env["SECRET_DESTINATIONS"] += f";{self.fake_urls['secondary']}"
            spec = {
                "urls": self.fake_urls,
                "policy": self.policy,
                "provider_changes": self.provider_changes,
            }
            out = self._shell("devtools.drill.setup", spec)
            self.key, self.roles = out["key"], out["roles"]
            if self.use_redis:
                self.redis = RedisServer(self.work)
                self.redis.start()
            self._start_gateways()
        except BaseException:
            self.stop()
            raise
        return self

    def _manage(self, name: str, args: list[str], env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=SETUP_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise DrillSetupError(f"manage.py {name} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def _shell(self, module: str, spec: dict[str, Any]) -> Any:
        """Run `module.main(spec, out)` in the embedded gateway's environment."""
        name = module.rsplit(".", 1)[1]
        spec_path, out_path = self.work / f"{name}-in.json", self.work / f"{name}-out.json"
        spec_path.write_text(json.dumps(spec))
        code = f"from {module} import main; main({str(spec_path)!r}, {str(out_path)!r})"
        self._manage(name, ["shell", "-c", code])
        return json.loads(out_path.read_text())

    def _start_gateways(self) -> None:
        env = dict(self.env)
        if self.redis is not None:
            env["REDIS_URL"] = self.redis.url
        for index in range(self.processes_wanted):
            port = free_port()
            argv = [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
                    "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
                    "--no-access-log", "--log-level", "warning",
                    "--loop", "failover_site.event_loop:new_event_loop"]  # fmt: skip
            log: IO[bytes]
            with open(self.work / f"gateway-{index}.log", "ab") as log:
                self.gateways.append(
                    subprocess.Popen(
                        argv,
                        cwd=ROOT,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(self.gateways, self.urls, strict=True):
            self._wait_ready(process, f"{url}/healthz", f"the gateway at {url}")

    def _wait_ready(self, process: subprocess.Popen[bytes], url: str, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise DrillSetupError(f"{what} exited:\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise DrillSetupError(f"{what} did not start:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for path in sorted(self.work.glob("*.log")):
            text += f"--- {path.name}\n" + "\n".join(
                path.read_text(errors="replace").splitlines()[-lines:]
            )
        return text

    def collect(self, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(self._shell("devtools.drill.collect", spec))

    def stop_gateways(self) -> None:
        """SIGTERM, as a deploy stops them: each process's lifespan flushes its ledger."""
        for process in self.gateways:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.gateways:
            _stop(process)
        self.gateways = []

    def stop(self) -> None:
        self.stop_gateways()
        for process, _ in self.fakes.values():
            _stop(process)
        self.fakes = {}
        if self.redis is not None:
            self.redis.stop()
        if not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> EmbeddedSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
