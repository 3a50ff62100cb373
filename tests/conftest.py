"""The suite runs twice: embedded (SQLite, in-process state; `services` tests deselected) and on
PostgreSQL + Redis (FAILOVER_TEST_PASS=services, everything). With FAILOVER_REQUIRE_SERVICES=1,
as in CI, unreachable services fail the pass and any skipped test counts as a failure."""

from __future__ import annotations

import os
import socket

import pytest
from django.conf import settings

SERVICES_PASS = os.environ.get("FAILOVER_TEST_PASS") == "services"
REQUIRE_SERVICES = os.environ.get("FAILOVER_REQUIRE_SERVICES") == "1"


def _unreachable_services() -> list[str]:
    import psycopg
    import redis

    problems = []
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        problems.append(f"DATABASE_URL is not PostgreSQL (engine {database['ENGINE']})")
    else:
        try:
            psycopg.connect(
                host=database["HOST"] or None,
                port=database["PORT"] or None,
                user=database["USER"] or None,
                password=database["PASSWORD"] or None,
                dbname=database["NAME"],
                connect_timeout=3,
            ).close()
        except psycopg.Error as exc:
            problems.append(f"PostgreSQL unreachable: {exc}")
    if not settings.REDIS_URL:
        problems.append("REDIS_URL is not set")
    else:
        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            problems.append(f"Redis unreachable: {exc}")
    return problems


def pytest_sessionstart(session: pytest.Session) -> None:
    if not SERVICES_PASS:
        return
    problems = _unreachable_services()
    if not problems:
        return
    message = "services pass: " + "; ".join(problems)
    if REQUIRE_SERVICES:
        pytest.exit(message + " (FAILOVER_REQUIRE_SERVICES=1)", returncode=1)
    pytest.exit(message + ": skipped this pass (CI requires it)", returncode=0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_SERVICES and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while services are required: {report.longrepr}"


@pytest.fixture(autouse=True)
def _services_only_where_configured(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("services") and not SERVICES_PASS:
        pytest.skip("needs PostgreSQL and Redis: runs in the services pass")


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening: a stopped server, as a client sees it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_process_env(data_dir: object, **extra: str) -> dict[str, str]:
    """The environment for a serving or worker process a test starts: this pass's test
    database (PostgreSQL: a child can't share SQLite's in-memory one) and Redis."""
    from django.db import connection

    database = connection.settings_dict
    return {
        **os.environ,
        "ENV_FILE": "",
        "DEBUG": "true",
        "DATA_DIR": str(data_dir),
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        **extra,
    }
