"""What a run measures: the fake provider itself, the bare proxy, and the gateway of this tree
(and of the baseline's checkout with --baseline), each started, checked, swept and stopped."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compare import BASELINE_LABEL, OTEL_LABEL
from procs import (
    BENCH_DIR,
    BENCH_KEY,
    LOAD_CPU,
    ROOT,
    SERVER_CPU,
    SETUP_TIMEOUT_S,
    BenchError,
    Processes,
    free_port,
    http,
    log_problems,
    log_tail,
    wait_ready,
)
from profiling import record_profile
from redisbench import RedisServer, RespError
from rediscount import count_per_request
from wrkrun import Run, Wrk

MODEL = "llama3.1:8b"
PROMPT = "Say hello."
PROVIDER_NAME = "bench-ollama"
REFUSING_NAME = "bench-refusing"  # with --primary-refused: priority 5, a closed port
# The frontends' request, and what the gateway's Ollama adapter sends upstream for it
# (gateway/adapters/ollama.py: json.dumps of model, messages, stream=False).
GATEWAY_BODY = json.dumps({"prompt": PROMPT})
# The same request on the OpenAI-compatible endpoint, as the openai SDK sends it, with the model
# any client app may ask for ("auto": the cascade).
CHAT_BODY = json.dumps({"model": "auto", "messages": [{"role": "user", "content": PROMPT}]})
# The gateway's endpoints a run can measure (`--endpoints`): path, body, and the suffix of
# the target's name (the frontends' endpoint keeps the plain name).
ENDPOINTS = {
    "complete": ("/api/v1/complete", GATEWAY_BODY, ""),
    "chat": ("/v1/chat/completions", CHAT_BODY, "-chat"),
}
UPSTREAM_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": False}
)


def pythonpath_for(root: Path) -> str:
    """A checkout's own packages ahead of the editable install's (whose finder comes last)."""
    rest = os.environ.get("PYTHONPATH", "")
    return f"{root}{os.pathsep}{rest}" if rest else str(root)


# The gateways' provider pools (`PROVIDER_HTTP_CLIENT`); "default" leaves it unset, so each
# checkout runs its own default (the way to compare commits whose defaults differ). The
# passthrough can put only the first two under httpx.
GATEWAY_TRANSPORTS = ("httpx", "aiohttp", "native", "default")
PASSTHROUGH_TRANSPORTS = ("httpx", "aiohttp")


def client_env(transport: str) -> dict[str, str]:
    return {} if transport == "default" else {"PROVIDER_HTTP_CLIENT": transport}


def gateway_loop(root: Path) -> str:
    """The event loop a gateway is served on, as its checkout's docs say to: uvloop with every
    waiting connection accepted at once where the checkout has it, else plain uvloop."""
    if (root / "failover_site" / "event_loop.py").exists():
        return "failover_site.event_loop:new_event_loop"
    return "uvloop"


@dataclass
class Variant:
    """A checkout the gateway runs from: this tree, or the baseline's (`--baseline DIR`),
    each with its own DATA_DIR (their migrations may differ)."""

    label: str  # "" or "@baseline"
    root: Path
    env: dict[str, str]
    ready: bool = False

    def target(self, transport: str, redis: bool, endpoint: str = "complete") -> str:
        suffix = ENDPOINTS[endpoint][2]
        return f"gateway{'+redis' if redis else ''}{suffix}{self.label}[{transport}]"


@dataclass
class Served:
    target: str  # on the frontends' endpoint
    variant: Variant
    proc: Any
    redis: RedisServer | None
    base: str  # the server's address
    transport: str

    @property
    def url(self) -> str:
        """The frontends' endpoint (the Redis count and the profile load it)."""
        return self.base + ENDPOINTS["complete"][0]

    def endpoints(self, chosen: list[str]) -> list[tuple[str, str, str]]:
        """(target, url, body) for each endpoint `--endpoints` chose."""
        redis = self.redis is not None
        return [
            (self.variant.target(self.transport, redis, name), self.base + path, body)
            for name, (path, body, _) in ENDPOINTS.items()
            if name in chosen
        ]


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
        self.redis_counts: dict[str, Any] = {}
        self.otel_counts: dict[str, Any] = {}
        self.data_dir = work / "data"
        self.data_dir.mkdir()
        self.env = self._base_env(self.data_dir)
        self.variants = [Variant("", ROOT, self.env)]
        self.baseline: dict[str, Any] | None = None
        if args.baseline:
            base_dir = work / "data-baseline"
            base_dir.mkdir()
            env = {**self._base_env(base_dir), "PYTHONPATH": pythonpath_for(args.baseline)}
            env["SECRET_KEY"] = self.env["SECRET_KEY"]
            self.variants.append(Variant(BASELINE_LABEL, args.baseline, env))
        self.otlp_sink = ""
        if getattr(args, "otel", False) and "gateway" in args.targets:
            # This tree again, exporting every request's trace to a receiver on the load's CPU.
            port = free_port()
            sink = [self.python, str(BENCH_DIR / "otlp_sink.py"), str(port)]
            proc = procs.start("otlp-sink", sink, self.env, LOAD_CPU)
            self.otlp_sink = f"http://127.0.0.1:{port}"
            wait_ready(proc, f"{self.otlp_sink}/count")
            otel_dir = work / "data-otel"
            otel_dir.mkdir()
            env = {**self._base_env(otel_dir), "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_sink}
            env["SECRET_KEY"] = self.env["SECRET_KEY"]
            self.variants.append(Variant(OTEL_LABEL, ROOT, env))
        self.redis_server_kind: str | None = None
        if args.redis and "gateway" in args.targets:
            dedicated = not args.shared_redis and shutil.which("redis-server") is not None
            self.redis_server_kind = "dedicated" if dedicated else "shared"
        self.redis_servers: dict[str, RedisServer] = {}
        # One column width for every line a sweep prints (the baseline's names are longer).
        names = [
            v.target(t, r, e)
            for v in self.variants
            for t in args.transports
            for r in (False, True)
            for e in args.endpoints
        ]
        self.width = max([24, *(len(n) for n in names if args.redis or "+redis" not in n)])
        if args.baseline:
            self.baseline = {**args.baseline_info, "interleaving": self._interleaving()}
        self.upstream: Any = None
        self.upstream_url = ""

    def _interleaving(self) -> str:
        text = (
            "interleaved: at each connection count this tree's gateway, then the baseline's "
            "(both servers up, each idle while the other is measured)"
        )
        if self.redis_server_kind == "shared":
            text += "; gateway+redis one after the other per transport (one shared db 12)"
        return text

    def _base_env(self, data_dir: Path) -> dict[str, str]:
        """Production-like and embedded: no DATABASE_URL/REDIS_URL, no .env, DEBUG=false."""
        drop = {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PROVIDER_HTTP_CLIENT"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(
            ENV_FILE="",
            DATA_DIR=str(data_dir),
            STATIC_ROOT=str(data_dir / "static"),
            DEBUG="false",
            SECRET_KEY=secrets.token_urlsafe(50),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            SECURE_SSL_REDIRECT="false",
            # The upstream is on this machine, as a self-hosted Ollama often is.
            OUTBOUND_ALLOW="loopback",
            DJANGO_SETTINGS_MODULE="failover_site.settings",
            PYTHONUNBUFFERED="1",
        )
        return env

    def _uvicorn(
        self, app: str, port: int, extra: list[str] | None = None, loop: str = "uvloop"
    ) -> list[str]:
        return [self.python, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--loop", loop, "--http", "httptools",
                "--no-access-log", "--log-level", "warning", *(extra or [])]  # fmt: skip

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

    def _sweep(self, targets: list[tuple[str, str, str]]) -> None:
        """Every connection count; at each, every (target, url, body) in turn."""
        width = max([self.width, *(len(target) for target, _, _ in targets)])
        for connections in self.args.connections:
            for target, url, body in targets:
                run = self.wrk.measure(target, url, body, connections)
                print(
                    f"  {target:<{width}} c={connections:<3} {run.rps:>9.1f} req/s  "
                    f"p50 {run.p50_ms:7.2f} ms  p99 {run.p99_ms:7.2f} ms"
                    + (f"  ERRORS {run.non_2xx} non-2xx {run.socket_errors}" if run.errors else ""),
                    flush=True,
                )
                if run.errors:
                    self.warnings.append(
                        f"{target} c={connections}: {run.non_2xx} non-2xx, socket errors "
                        f"{run.socket_errors or 0} (of {run.requests} requests)"
                    )
                self.runs.append(run)

    # ---- direct and passthrough

    def direct(self) -> None:
        # The upstream is the measured server here: it gets CPU 0 to itself.
        proc, url = self._start_fake("upstream-direct", SERVER_CPU)
        try:
            self._sweep([("direct", f"{url}/api/chat", UPSTREAM_BODY)])
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
            self._sweep([(f"passthrough[{transport}]", f"{url}/api/chat", UPSTREAM_BODY)])
        finally:
            self.procs.stop(proc)

    # ---- the gateway (this tree's, and the baseline's)

    def setup_gateway(self, variant: Variant) -> None:
        """migrate + bootstrap in the variant's DATA_DIR, and the one provider: the upstream."""
        if variant.ready:
            return
        self.ensure_upstream()
        env = {**variant.env, "BENCH_UPSTREAM": self.upstream_url, "BENCH_KEY": BENCH_KEY}
        create = (
            "import os; from providers.models import Provider; "
            f"Provider.objects.update_or_create(name={PROVIDER_NAME!r}, defaults=dict("
            f"kind='ollama', base_url=os.environ['BENCH_UPSTREAM'], model={MODEL!r}, "
            "is_local=True, priority=10, enabled=True)); "
            + (
                # A primary that refuses every connection, before the one that answers.
                f"Provider.objects.update_or_create(name={REFUSING_NAME!r}, defaults=dict("
                f"kind='ollama', base_url='http://127.0.0.1:{free_port()}', model={MODEL!r}, "
                "is_local=True, priority=5, enabled=True)); "
                if self.args.primary_refused and not variant.label
                else ""
            )
            + "print('providers:', list(Provider.objects.filter(enabled=True)"
            ".values_list('name', 'base_url', 'priority')))"
        )
        # The bench's client app, limited far above any load here so the rate limit's
        # bookkeeping is on the measured path as in production. A tree without client keys
        # has nothing to make.
        client = (
            "import os\n"
            "try:\n"
            "    from gateway.engine.clients import key_digest\n"
            "    from providers.models import ClientApp\n"
            "except ImportError:\n"
            "    ClientApp = None\n"
            "if ClientApp is not None:\n"
            "    key = os.environ['BENCH_KEY']\n"
            "    ClientApp.objects.update_or_create(name='bench', defaults=dict(\n"
            "        key_prefix=key[:12], key_digest=key_digest(key),\n"
            "        requests_per_minute=100_000_000, tokens_per_minute=0))\n"
        )
        for name, argv in (
            ("migrate", [self.python, "manage.py", "migrate", "--noinput"]),
            ("bootstrap", [self.python, "manage.py", "bootstrap"]),
            ("provider", [self.python, "manage.py", "shell", "-c", create]),
            ("client app", [self.python, "manage.py", "shell", "-c", client]),
        ):
            done = self.procs.run(
                f"{name}{variant.label}", argv, env, None, SETUP_TIMEOUT_S, cwd=variant.root
            )
            if done.returncode != 0:
                raise BenchError(
                    f"manage.py {name}{' (baseline)' if variant.label else ''} failed:\n"
                    f"{done.stdout}\n{done.stderr}"
                )
        variant.ready = True

    def redis_for(self, variant: Variant) -> RedisServer:
        """Its own Redis server per variant (dedicated), or the shared one for all."""
        key = variant.label if self.redis_server_kind == "dedicated" else "shared"
        if key not in self.redis_servers:
            if self.redis_server_kind == "dedicated":
                server = RedisServer.start(
                    self.procs, f"redis{variant.label}", self.work, self.args.redis_cpu
                )
                if not server.one_read_per_write():
                    self.warnings.append(
                        "redis: a pipeline in one write was not one read event on the dedicated "
                        "server; round trips per request may be off"
                    )
            else:
                server = RedisServer.shared()
            self.redis_servers[key] = server
        return self.redis_servers[key]

    def gateways(self, transport: str, redis: bool) -> None:
        # Two gateways on one Redis db would share keys that differ between commits: on the
        # shared server, one at a time.
        if redis and self.redis_server_kind == "shared":
            groups = [[variant] for variant in self.variants]
        else:
            groups = [self.variants]
        for group in groups:
            self._gateway_group(group, transport, redis)

    def _gateway_group(self, group: list[Variant], transport: str, redis: bool) -> None:
        served: list[Served] = []
        try:
            for variant in group:
                served.append(self._start_gateway(variant, transport, redis))
            self._sweep([each for s in served for each in s.endpoints(self.args.endpoints)])
            for s in served:
                for target, url, body in s.endpoints(self.args.endpoints):
                    self._expect_primary(target, url, body, s.proc, "after measuring")
                if s.variant.label == OTEL_LABEL:
                    self._expect_spans(s)
            for s in served:
                if s.redis is not None:
                    print(f"  {s.target}: counting Redis work per request", flush=True)
                    try:
                        self.redis_counts[s.target] = count_per_request(
                            s.redis, s.url, GATEWAY_BODY, self.args.redis_count
                        )
                    except (OSError, RespError, http.client.HTTPException) as exc:
                        raise BenchError(f"{s.target}: counting its Redis work: {exc!r}") from None
                if self.args.py_spy:
                    self.profile(s)
        finally:
            for s in served:
                self.procs.stop(s.proc)
                if s.redis is not None:
                    s.redis.flush()
        for s in served:
            if problems := log_problems(s.proc):
                self.warnings.append(
                    f"{s.target}: {len(problems)} error lines in its log, first: {problems[0]}"
                )

    def _start_gateway(self, variant: Variant, transport: str, redis: bool) -> Served:
        self.setup_gateway(variant)
        target = variant.target(transport, redis)
        env = {**variant.env, **client_env(transport)}
        server = None
        if redis:
            server = self.redis_for(variant)
            env["REDIS_URL"] = server.url
            server.flush()
        port = free_port()
        argv = self._uvicorn(
            "failover_site.asgi:application", port, ["--lifespan", "on"], gateway_loop(variant.root)
        )
        name = target.replace("[", "-").rstrip("]")
        proc = self.procs.start(name, argv, env, SERVER_CPU, cwd=variant.root)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(proc, f"{base}/healthz")
            served = Served(target, variant, proc, server, base, transport)
            for each_target, url, body in served.endpoints(self.args.endpoints):
                self._expect_primary(each_target, url, body, proc, "before measuring")
        except BaseException:
            self.procs.stop(proc)
            raise
        return served

    def _expect_primary(self, target: str, url: str, sent: str, proc: Any, when: str) -> None:
        status, body = http("POST", url, sent)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        if isinstance(answer, dict):  # OpenAI's shape says which tier in its `failover`
            answer = answer.get("failover") or answer
        # With --primary-refused this tree's primary refuses (the baseline's doesn't).
        refused = self.args.primary_refused and "@baseline" not in target
        expected = "secondary" if refused else "primary"
        if status != 200 or answer.get("tier") != expected:
            raise BenchError(
                f"{target} {when}: expected 200 with tier {expected!r}, got {status}: "
                f"{body[:400]!r}\n  (the cascade did not reach the fake provider, so this "
                f"would not measure the proxy path)\n{log_tail(proc)}"
            )

    def _expect_spans(self, served: Served) -> None:
        """A traced gateway measured without exporting would measure tracing off."""
        status, body = http("GET", f"{self.otlp_sink}/count")
        counts = json.loads(body) if status == 200 else {}
        if not counts.get("spans"):
            raise BenchError(
                f"{served.target}: the OTLP receiver got no spans ({status}: {body[:200]!r})"
                f"\n{log_tail(served.proc)}"
            )
        self.otel_counts[served.target] = counts

    def flush_shared_redis(self) -> None:
        """At the end: db 12 of the shared server (a dedicated one went with its process)."""
        for server in self.redis_servers.values():
            server.close()
            if not server.dedicated:
                server.flush()

    def profile(self, served: Served) -> None:
        summary, warning = record_profile(
            self.procs,
            python=self.python,
            work=self.work,
            target=served.target,
            url=served.url,
            body=GATEWAY_BODY,
            pid=served.proc.pid,
            seconds=self.args.py_spy_seconds,
            connections=self.args.py_spy_connections,
        )
        if warning and warning not in self.warnings:
            self.warnings.append(warning)
        if summary is not None:
            self.profiles[served.target] = summary
