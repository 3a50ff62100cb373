"""Routing fixtures: two fake providers over loopback, a gateway with a clock the test moves,
and an HTTP client speaking to the real ASGI application."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from devtools.fake_provider import FakeProvider
from gateway.engine.clock import Clock
from providers.models import Provider
from providers.selectors import policy_get
from providers.services.seeding import static_answers_load_defaults
from runtime.gateway import Gateway, make_store
from tests.factories import AUTH, make_client_app
from tests.providers.route_bench import RouteBench, two_providers
from tests.serving import handed, serving


@dataclass
class FakeClock:
    """Wall time the test moves by hand; monotonic time stays real (deadlines are real)."""

    now: float = field(default_factory=time.time)

    def wall(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def primary(primary_fake: FakeProvider) -> Iterator[FakeProvider]:
    """The primary's fake (one per worker: `tests/conftest.py`), as if just started."""
    primary_fake.restore()
    yield primary_fake
    primary_fake.restore()  # a call the test left hanging ends now


@pytest.fixture
def secondary(secondary_fake: FakeProvider) -> Iterator[FakeProvider]:
    secondary_fake.restore()
    yield secondary_fake
    secondary_fake.restore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def bench(primary, secondary, clock) -> AsyncIterator[RouteBench]:
    """Routing at `route()` (`route_bench.py`) on the store this pass runs (memory, or the
    test Redis), with no database."""
    _flush_test_redis()
    gateway = Gateway(store=make_store(), clock=Clock(wall=clock.wall, mono=time.monotonic))
    try:
        yield RouteBench(gateway, two_providers(primary, secondary))
    finally:
        await gateway.adapters.aclose()
        await gateway.store.aclose()
        _flush_test_redis()


@pytest.fixture
def providers_configured(transactional_db, primary, secondary) -> dict[str, Provider]:
    """ollama-local (self-hosted, priority 10) → openai-cloud (priority 20), the 50 answers,
    and the suite's client app (`TEST_CLIENT_KEY`)."""
    static_answers_load_defaults()
    policy_get()
    make_client_app(name="suite")
    local = Provider.objects.create(
        name="ollama-local",
        kind="ollama",
        base_url=primary.url,
        model="llama3.1:8b",
        priority=10,
        is_local=True,
        timeout_s=5,
    )
    cloud = Provider.objects.create(
        name="openai-cloud",
        kind="openai",
        base_url=secondary.url,
        model="gpt-4o-mini",
        priority=20,
        is_local=False,
        timeout_s=5,
        price_input_per_1m=Decimal("0.15"),
        price_output_per_1m=Decimal("0.60"),
    )
    return {"primary": local, "secondary": cloud}


def _flush_test_redis() -> None:
    if settings.REDIS_URL:
        redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.fixture
async def gateway(providers_configured, clock) -> AsyncIterator[Gateway]:
    """The process's gateway on the store this pass runs (memory, or the test Redis)."""
    _flush_test_redis()
    gateway = Gateway(store=make_store(), clock=Clock(wall=clock.wall, mono=time.monotonic))
    with serving(gateway):
        yield gateway
        await gateway.aclose()
    _flush_test_redis()
    # The ORM ran in asgiref's worker thread: close its connection there, or the test
    # database can't be dropped at the end of the run.
    await sync_to_async(connections.close_all)()


@pytest.fixture
async def api(gateway) -> AsyncIterator[httpx.AsyncClient]:
    from failover_site.asgi import application

    transport = httpx.ASGITransport(app=handed(application, gateway))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=AUTH
    ) as client:
        yield client


async def ask(api: httpx.AsyncClient, prompt: str = "Say hello.", **fields) -> httpx.Response:
    return await api.post("/api/v1/complete", json={"prompt": prompt, **fields})


def count_redis_writes(
    monkeypatch: pytest.MonkeyPatch, task: asyncio.Task | None = None
) -> list[object]:
    """Every write of one or more commands to Redis (each a round trip), made by `task` if one
    is named: through redis-py's connections and through the record script's pipe
    (`gateway.state.script_pipe`)."""
    import redis.asyncio.connection as connection

    from gateway.state.script_pipe import Wire

    sent: list[object] = []
    on_redis_py = connection.AbstractConnection.send_packed_command
    on_the_pipe = Wire.send

    async def through_redis_py(self, command, *args, **kwargs):
        if task is None or asyncio.current_task() is task:
            sent.append(command)
        return await on_redis_py(self, command, *args, **kwargs)

    async def through_the_pipe(self, command):
        if task is None or asyncio.current_task() is task:
            sent.append(command)
        return await on_the_pipe(self, command)

    monkeypatch.setattr(connection.AbstractConnection, "send_packed_command", through_redis_py)
    monkeypatch.setattr(Wire, "send", through_the_pipe)
    return sent


async def round_trips_of_steady_requests(
    api: httpx.AsyncClient, monkeypatch, times: int = 5, tier: str = "primary"
):
    """How many Redis exchanges each of `times` plain requests made itself (after the ones that
    warm the readings and the providers' latency history up: a call without a history runs in
    a task of its own, `routing/hedge.py`), counted where redis-py sends a command and where
    the record script's pipe does; the background poller and the ledger run in tasks of their
    own and are not counted."""
    from gateway.routing.breaker_watch import MIN_SAMPLES

    # The first request reads the breaker; later ones ride on the replies.
    for _ in range(MIN_SAMPLES):
        assert (await ask(api)).json()["tier"] == tier
    sent = count_redis_writes(monkeypatch, task=asyncio.current_task())
    counts = []
    try:
        for _ in range(times):
            sent.clear()
            assert (await ask(api)).json()["tier"] == tier
            counts.append(len(sent))
    finally:
        monkeypatch.undo()
    return counts


async def ledger_rows(gateway: Gateway, at_least: int = 0, timeout: float = 10.0) -> list:
    """The ledger's rows, oldest first, once `at_least` of them are written. A streamed
    answer's row is added after its last byte, which the client may read first: a test that
    read a stream names the rows it waits for (polled, with a deadline)."""
    from billing.models import CallRecord

    deadline = time.monotonic() + timeout
    while True:
        await gateway.ledger.flush()
        rows = await sync_to_async(lambda: list(CallRecord.objects.order_by("created_at", "id")))()
        if len(rows) >= at_least:
            return rows
        assert time.monotonic() < deadline, f"{len(rows)} ledger rows of {at_least} in time"
        await asyncio.sleep(0.05)


async def update_policy(gateway: Gateway, **values) -> None:
    """Change the policy as an operator would (a recorded change, which bumps the version)."""
    await _update_row(gateway, policy_get, values)


async def update_provider(gateway: Gateway, name: str, **values) -> None:
    """Change a provider as an operator would (a recorded change, which bumps the version)."""
    await _update_row(gateway, lambda: Provider.objects.get(name=name), values)


async def update_client_app(gateway: Gateway, name: str, **values) -> None:
    """Change a client app as an operator would (a recorded change, which bumps the version)."""
    from providers.models import ClientApp

    await _update_row(gateway, lambda: ClientApp.objects.get(name=name), values)


async def _update_row(gateway: Gateway, get_row: Callable[[], object], values: dict) -> None:
    from providers.services.audit import config_change_record, instance_snapshot

    def change() -> None:
        row = get_row()
        before = instance_snapshot(row)
        for key, value in values.items():
            setattr(row, key, value)
        row.full_clean()
        row.save()
        config_change_record(
            target=row, action="update", before=before, after=instance_snapshot(row)
        )

    await sync_to_async(change)()
    # The process swaps snapshots in the background within a second; a test goes on at once.
    await gateway.snapshots.refresh()


@contextmanager
def serve_platform(gateway: Gateway, on_stop: Callable[[], Awaitable[None]]) -> Iterator[str]:
    """The real ASGI application served by uvicorn on a loopback port, in a thread of this
    process, with `gateway` handed to its requests; `on_stop` runs on the server's loop as it
    ends (its connections are that loop's)."""
    from failover_site.asgi import application

    with serve_asgi(handed(application, gateway), on_stop) as url:
        yield url


@contextmanager
def serve_asgi(
    application: Any, on_stop: Callable[[], Awaitable[None]], *, lifespan: str = "off"
) -> Iterator[str]:
    """`application` served by uvicorn on a loopback port, in a thread of this process."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(application, lifespan=lifespan, log_level="warning", timeout_keep_alive=5)
    )

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            await on_stop()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the live server stopped as it started"
        assert time.monotonic() < deadline, "the live server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextmanager
def platform_served() -> Iterator[str]:
    """The whole platform on a loopback port with a gateway of its own, as a serving process
    runs it (the committed changes go to its gateway)."""
    _flush_test_redis()
    gateway = Gateway(store=make_store())
    try:
        with serving(gateway), serve_platform(gateway, gateway.aclose) as url:
            yield url
    finally:
        _flush_test_redis()


@pytest.fixture
def live_url(gateway) -> Iterator[str]:
    """The platform on a real socket, sharing the test's gateway: for clients that need one
    (streaming, the official SDKs, a client that hangs up)."""

    async def release_this_loops_connections() -> None:
        await gateway.adapters.aclose()
        await gateway.store.aclose()

    with serve_platform(gateway, release_this_loops_connections) as url:
        yield url


# Anthropic behind the gateway -------------------------------------------------------------

CLAUDE_MODEL = "claude-haiku-4-5"
CLAUDE_KEY = "sk-ant-test-key"


@pytest.fixture
def claude() -> Iterator[FakeProvider]:
    with FakeProvider(models=[CLAUDE_MODEL], api_key=CLAUDE_KEY, text="Hello from Claude.") as fake:
        yield fake


@pytest.fixture
def anthropic_only(providers_configured, claude, monkeypatch) -> Provider:
    """Anthropic as the only enabled provider: every answer comes through its translation."""
    monkeypatch.setenv("FAILOVER_SECRET_TEST_ANTHROPIC_KEY", CLAUDE_KEY)
    Provider.objects.filter(name__in=["ollama-local", "openai-cloud"]).update(enabled=False)
    return Provider.objects.create(
        name="anthropic-cloud",
        kind="anthropic",
        base_url=claude.url,
        model=CLAUDE_MODEL,
        api_key_env="FAILOVER_SECRET_TEST_ANTHROPIC_KEY",
        priority=15,
        is_local=False,
        timeout_s=5,
    )
