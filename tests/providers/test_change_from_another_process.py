"""A configuration change made by another process (here `manage.py shell`) reaches a running
server within a second and a half, in the embedded mode (SQLite file, in-process state) as with
PostgreSQL and Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from devtools.ports import free_port
from tests.conftest import child_process_env
from tests.factories import AUTH

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Do you offer refunds?"  # one of the shipped static answers
FLIP_THE_KILL_SWITCH = (
    "from providers.services.policy import kill_switch_set; "
    "kill_switch_set(mode='static_only', provider=None, reason='drill from a shell', actor=None)"
)


def _embedded_env(data_dir: Path) -> dict[str, str]:
    """The embedded mode's environment: a SQLite file under `data_dir`, no Redis."""
    services = {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    inherited = {key: value for key, value in os.environ.items() if key not in services}
    return {**inherited, "ENV_FILE": "", "DEBUG": "true", "DATA_DIR": str(data_dir)}


def _manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@contextmanager
def _serving(env: dict[str, str], log_dir: Path) -> Iterator[str]:
    """One uvicorn serving process, as deployed (lifespan on: its background jobs run)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (log_dir / "uvicorn.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
         "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
         "--loop", "failover_site.event_loop:new_event_loop"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (log_dir / "uvicorn.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the serving process did not start"
            time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        log.close()


def _ask(url: str, auth: dict[str, str]) -> dict:
    response = httpx.post(
        f"{url}/api/v1/complete", json={"prompt": QUESTION}, headers=auth, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


def _status(url: str, auth: dict[str, str]) -> dict:
    response = httpx.get(f"{url}/api/v1/status", headers=auth, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def _a_kill_switch_flipped_in_a_shell_is_served_within_a_second_and_a_half(
    url: str, env: dict[str, str], auth: dict[str, str]
) -> None:
    before = _status(url, auth)
    assert before["kill_switch"]["state"] == "off"
    assert _ask(url, auth)["provider"] == "ollama-local"
    _manage(env, "shell", "-c", FLIP_THE_KILL_SWITCH)  # committed before the shell exits
    flipped = time.monotonic()
    while _ask(url, auth)["tier"] != "static":
        assert time.monotonic() - flipped < 1.5, "the running server never saw the change"
        time.sleep(0.05)
    after = _status(url, auth)
    assert after["kill_switch"]["state"] == "static_only"
    assert after["config_version"] != before["config_version"]


# Its own SQLite file, none of the test database: the embedded pass only.
@pytest.mark.backend_free
def test_in_the_embedded_mode_a_change_made_in_a_shell_reaches_the_running_server(
    primary, tmp_path
):
    env = _embedded_env(tmp_path / "data")
    set_up = (
        "from django.core.management import call_command; "
        "from providers.models import Provider; "
        "call_command('migrate', verbosity=0); call_command('bootstrap', verbosity=0); "
        "Provider.objects.create(name='ollama-local', kind='ollama', "
        f"base_url={primary.url!r}, model='llama3.1:8b', priority=10, is_local=True, "
        "timeout_s=5)"
    )
    _manage(env, "shell", "-c", set_up)
    # A client app made the way a deployment scripts one: its key printed once, as JSON.
    made = json.loads(_manage(env, "clientapp", "create", "drill", "--status", "--json"))
    auth = {"Authorization": f"Bearer {made['key']}"}
    with _serving(env, tmp_path) as url:
        _a_kill_switch_flipped_in_a_shell_is_served_within_a_second_and_a_half(url, env, auth)


@pytest.mark.services
def test_with_postgresql_and_redis_a_change_made_in_a_shell_reaches_the_running_server(
    providers_configured, tmp_path
):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    env = child_process_env(tmp_path)
    try:
        with _serving(env, tmp_path) as url:
            _a_kill_switch_flipped_in_a_shell_is_served_within_a_second_and_a_half(url, env, AUTH)
    finally:
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
