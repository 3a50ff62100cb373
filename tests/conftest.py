"""The suite runs twice: embedded (SQLite, in-process state; `services` tests deselected) and on
PostgreSQL + Redis (FAILOVER_TEST_PASS=services, everything). With FAILOVER_REQUIRE_SERVICES=1,
as in CI, unreachable services fail the pass and any skipped test counts as a failure. Each
xdist worker of each checkout has a test database and a Redis db of its own (`tests/isolation.py`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from alerts.raising import request_throttle
from devtools.fake_provider import FakeProvider
from devtools.ports import free_port
from runtime.scheduler import one_off_jobs_settle
from tests.isolation import WORKER, RedisClaim, point_at_claimed_redis, test_database_name

SERVICES_PASS = os.environ.get("FAILOVER_TEST_PASS") == "services"
REQUIRE_SERVICES = os.environ.get("FAILOVER_REQUIRE_SERVICES") == "1"
_redis_claim: RedisClaim | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _redis_claim
    # Hashing with Django's default (a million PBKDF2 rounds) is most of what making a user or
    # logging one in costs; no test is about the hash's strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    runs_tests = not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")
    if runs_tests:
        # A data directory of this worker's own: a ledger spill file one worker's test writes
        # is never another's to count or to replay.
        # On tmpfs where the machine has one: the embedded pass's database lives there too.
        shm = Path("/dev/shm")
        where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        settings.DATA_DIR = Path(tempfile.mkdtemp(prefix=f"failover-test-{WORKER}-", dir=where))
    if SERVICES_PASS and settings.REDIS_URL and runs_tests:
        import redis

        try:
            _redis_claim = RedisClaim(settings.REDIS_URL)
        except redis.RedisError:
            return  # pytest_sessionstart says Redis is unreachable
        point_at_claimed_redis(settings, _redis_claim)
    if SERVICES_PASS:
        _flush_postgresql_by_delete()
        _patient_redis()


def _patient_redis() -> None:
    """The gateway gives up on Redis after 0.5 s and routes on local state: right for a
    deployment, but on this suite's loaded machine a connection now and then takes longer, and
    a test about something else (a budget's cap, the sentinel's last run) would see the
    fallback's state. The tests of the fallback point at a closed port, refused at once, and
    none depends on the 0.5 s itself; the processes a test starts keep the deployment's value."""
    from gateway.state import redis_store

    redis_store.SOCKET_TIMEOUT_S = 5.0


def _flush_postgresql_by_delete() -> None:
    """Between transactional tests Django empties every table with one TRUNCATE, which costs
    PostgreSQL about 0.17 s for this schema (new files for each of two dozen tables) against
    5 ms for deleting the few rows a test wrote. The tables are emptied all the same, in one
    transaction, the foreign keys checked at its end; a flush that resets sequences keeps
    Django's TRUNCATE."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = [f"DELETE FROM {self.quote_name(table)};" for table in tables]
        return ["SET CONSTRAINTS ALL DEFERRED;", *deletes]

    DatabaseOperations.sql_flush = sql_flush


def pytest_unconfigure(config: pytest.Config) -> None:
    if _redis_claim is not None:
        _redis_claim.release()
    if Path(settings.DATA_DIR).name.startswith("failover-test-"):
        shutil.rmtree(settings.DATA_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """The test database named for this checkout and this worker (pytest-django's own suffix
    would name it for the worker only). SQLite's is a file in this worker's data directory, as
    the embedded mode's is, not SQLite's shared in-memory database: there, a thread that meets
    a table another thread is writing fails at once ("database table is locked", no busy
    timeout applies), where the embedded mode's file waits its turn."""
    for database in settings.DATABASES.values():
        test = database.setdefault("TEST", {})
        if database["ENGINE"] == "django.db.backends.sqlite3":
            test["NAME"] = str(Path(settings.DATA_DIR) / "test.sqlite3")
        else:
            test["NAME"] = test_database_name(database["NAME"])


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each pass deals whole modules out to its workers (`--dist loadscope`), in the order
    collected: the long ones (marked `slow`) go first, so none of them is left running alone
    at the end while the other workers wait."""
    for item in items:
        # Schemathesis names each operation's test (`test_...[POST /v1/chat/completions]`) but,
        # under pytest 9, gives them all the function's node id: a scheduler that deals out node
        # ids, as the module-wise one does, would run one operation of each and drop the rest.
        label = getattr(item, "operation_label", None)
        if label is not None and not item.nodeid.endswith("]"):
            item._id = item._id.with_params(label)
    twice = [nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1]
    if twice:
        raise pytest.UsageError(f"tests collected under one node id (run once by xdist): {twice}")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_SERVICES and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while services are required: {report.longrepr}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """An alert delivery a test handed to this process's threads ends with the test, before its
    fixtures (the database among them) are torn down: left running, it would reach into the
    next test's database, or hold its tables while they are flushed."""
    one_off_jobs_settle(10.0)


@pytest.fixture(autouse=True)
def _services_only_where_configured(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("services") and not SERVICES_PASS:
        pytest.skip("needs PostgreSQL and Redis: runs in the services pass")


@pytest.fixture(autouse=True)
def _fresh_alert_throttle() -> None:
    """The request path's alert throttle is the process's: one test's static-tier answer must not
    keep the next test's alert from being raised."""
    request_throttle.clear()


@pytest.fixture(scope="session")
def primary_fake() -> Iterator[FakeProvider]:
    """The routing tests' self-hosted model, started once per worker: the `primary` fixture
    restores it before and after each test (`FakeProvider.restore`)."""
    with FakeProvider(models=["llama3.1:8b"], text="Hello from the local model.") as fake:
        yield fake


@pytest.fixture(scope="session")
def secondary_fake() -> Iterator[FakeProvider]:
    """The cloud model, shared the same way (the `secondary` fixture)."""
    with FakeProvider(models=["gpt-4o-mini"], text="Hello from the cloud model.") as fake:
        yield fake


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening: a stopped server, as a client sees it."""
    return free_port()


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
