from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import redis
from django.db import connection, connections
from django.test import override_settings

from gateway.state.memory_store import MemoryStore
from runtime.gateway import Gateway
from tests.serving import ServingClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client() -> ServingClient:
    """The probes as a serving process answers them: its gateway in each request's scope."""
    return ServingClient(Gateway(store=MemoryStore()))


def test_healthz_says_the_process_is_up(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_refuses_other_methods_with_405(client):
    assert client.post("/healthz").status_code == 405


def test_readyz_is_ready_with_the_database_reachable(client, settings):
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["database"]["vendor"] == connection.vendor


@override_settings(REDIS_URL="")
def test_readyz_says_state_is_in_process_without_redis(client):
    redis_check = client.get("/readyz").json()["checks"]["redis"]
    assert redis_check == {"ok": True, "configured": False, "state": "in-process"}


def test_readyz_reports_a_stopped_database_as_not_ready(client, monkeypatch, closed_port, tmp_path):
    from edge import probes

    settings_dict = dict(connection.settings_dict)
    if connection.vendor == "sqlite":
        # An embedded database whose file can't be opened is as gone as a stopped server.
        settings_dict["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port))
    # A connection of its own, so the suite's database connection stays as it is.
    stopped = type(connections["default"])(settings_dict, alias="default")
    monkeypatch.setattr(probes, "connection", stopped)
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "not_ready"
    assert body["checks"]["database"]["ok"] is False
    assert "OperationalError" in body["checks"]["database"]["error"]


def test_readyz_reports_an_unreachable_redis_as_not_ready(client, closed_port):
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed_port}/0"):
        response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["redis"]["ok"] is False
    assert body["checks"]["redis"]["configured"] is True
    assert "ConnectionError" in body["checks"]["redis"]["error"]
    assert "local state" in body["checks"]["redis"]["routing"]
    assert body["checks"]["database"]["ok"] is True


def test_readyz_tells_anyone_else_only_ready(client):
    response = client.get("/readyz", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 200
    assert response.json() == {"status": "ready"}


def test_readyz_tells_anyone_else_only_not_ready_with_no_error_text(client, closed_port):
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed_port}/0"):
        outside = client.get("/readyz", REMOTE_ADDR="203.0.113.9")
        inside = client.get("/readyz", REMOTE_ADDR="127.0.0.1")
    assert outside.status_code == 503
    assert outside.json() == {"status": "not_ready"}
    assert b"Error" not in outside.content and str(closed_port).encode() not in outside.content
    # The machine itself (the default allowed address) is told which check failed and why.
    assert inside.status_code == 503
    assert "ConnectionError" in inside.json()["checks"]["redis"]["error"]


def test_readyz_names_the_checks_to_an_allowed_network(client):
    with override_settings(PROBE_DETAIL_ALLOWED_IPS=["10.0.0.0/8", "2001:db8::/32"]):
        from_network = client.get("/readyz", REMOTE_ADDR="10.1.2.3")
        from_ipv6 = client.get("/readyz", REMOTE_ADDR="2001:db8::7")
        from_loopback = client.get("/readyz", REMOTE_ADDR="127.0.0.1")
    assert from_network.json()["checks"]["database"]["ok"] is True
    assert "checks" in from_ipv6.json()
    assert from_loopback.json() == {"status": "ready"}  # no longer on the list


def test_an_invalid_allowed_address_fails_at_start_up(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={
            "PATH": os.environ["PATH"],
            "ENV_FILE": "",
            "DATA_DIR": str(tmp_path),
            "DJANGO_SETTINGS_MODULE": "failover_site.settings",
            "PROBE_DETAIL_ALLOWED_IPS": "127.0.0.1,not-an-address",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "PROBE_DETAIL_ALLOWED_IPS" in result.stderr and "not-an-address" in result.stderr


@pytest.mark.services
def test_readyz_follows_a_real_redis_that_stops(client, closed_port, tmp_path):
    """A Redis of the test's own: ready while it runs, not ready once it is shut down."""
    server = shutil.which("redis-server")
    assert server, "redis-server is needed for the services pass"
    process = subprocess.Popen(
        [
            server,
            "--port",
            str(closed_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{closed_port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the test's Redis did not start"
                time.sleep(0.05)
        with override_settings(REDIS_URL=url):
            assert client.get("/readyz").status_code == 200
            redis.Redis.from_url(url).shutdown(nosave=True)
            process.wait(timeout=10)
            response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["redis"]["ok"] is False
    finally:
        process.kill()
        process.wait()


@pytest.mark.services
def test_the_services_pass_runs_on_postgresql_and_redis(settings):
    assert connection.vendor == "postgresql"
    assert settings.STATE_BACKEND == "redis"
    from django.core.cache import cache

    cache.set("failover-test-key", "stored", 5)
    assert cache.get("failover-test-key") == "stored"
    assert redis.Redis.from_url(settings.REDIS_URL).ping() is True


async def test_a_body_too_large_for_any_page_is_refused_as_it_arrives():
    import httpx

    from failover_site.asgi import application

    sent = 0

    async def endless():
        nonlocal sent
        for _ in range(1000):  # 64 MiB if nobody stops reading
            sent += 65_536
            yield b"x" * 65_536

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.post("/admin/login/", content=endless())
    assert response.status_code == 413
    assert sent < 4 * 1024 * 1024  # the default cap is 1 MiB
