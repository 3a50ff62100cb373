"""Two real serving processes on one Redis behave as one breaker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from billing.models import CallRecord
from providers.selectors import policy_get
from tests.conftest import child_process_env
from tests.factories import AUTH, make_client_app

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def serving_processes(providers_configured, tmp_path):
    """Two uvicorn processes on the test database and the test Redis."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    env = child_process_env(tmp_path)
    processes, urls = [], []
    for _ in range(2):
        port = _free_port()
        log = (tmp_path / f"uvicorn-{port}.log").open("w")
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
                 "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url, process in zip(urls, processes, strict=True):
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, "a serving process exited at start"
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.1)
        yield urls
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)  # lifespan shutdown flushes the ledger
        for process in processes:
            process.wait(timeout=20)
        redis.Redis.from_url(settings.REDIS_URL).flushdb()


def _ask(url: str, prompt: str = "Say hello.") -> dict:
    response = httpx.post(
        f"{url}/api/v1/complete", json={"prompt": prompt}, headers=AUTH, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_when_one_process_opens_the_breaker_the_other_stops_calling(
    serving_processes, primary, secondary
):
    first, second = serving_processes
    primary.set_fault(mode="error")
    for _ in range(3):
        assert _ask(first)["provider"] == "openai-cloud"
    assert primary.calls == 3
    primary.set_fault(mode="ok")
    for _ in range(3):
        assert _ask(second)["provider"] == "openai-cloud"
    assert primary.calls == 3  # the second process never tried the open primary


def test_half_open_probes_are_n_in_total_across_processes(serving_processes, primary, secondary):
    policy = policy_get()
    policy.cooldown_s, policy.max_cooldown_s = 1, 600
    policy.save()
    # No admin here: tell the processes the way the admin does.
    redis.Redis.from_url(settings.REDIS_URL).incr("fo:config:version")
    time.sleep(1.2)  # both processes poll the version every 0.5 s
    first, second = serving_processes
    primary.set_fault(mode="error")
    for _ in range(3):
        _ask(first)
    calls_when_opened = primary.calls
    time.sleep(1.2)  # the cooldown (1 s) passes
    primary.set_fault(mode="slow", delay_ms=400)

    async def burst() -> list[dict]:
        async with httpx.AsyncClient(timeout=10, headers=AUTH) as client:
            responses = await asyncio.gather(
                *(
                    client.post(f"{url}/api/v1/complete", json={"prompt": "Say hello."})
                    for url in [first, second] * 6
                )
            )
        return [r.json() for r in responses]

    answers = asyncio.run(burst())
    assert primary.calls - calls_when_opened == 3
    assert sum(a["provider"] == "ollama-local" for a in answers) == 3


def test_every_request_of_both_processes_reaches_the_ledger(serving_processes, primary):
    first, second = serving_processes
    ids = {_ask(url)["request_id"] for url in [first, second] * 10}
    deadline = time.monotonic() + 10
    while True:  # each process flushes within a second
        stored = {
            str(request_id)
            for request_id in CallRecord.objects.values_list("request_id", flat=True)
        }
        if stored >= ids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert stored == ids


def test_a_client_apps_rate_limit_holds_across_processes(serving_processes, primary):
    key = "fgw_two-process-rate-key-00000000000000000000000"
    make_client_app(key=key, name="two-process", requests_per_minute=6)
    redis.Redis.from_url(settings.REDIS_URL).incr("fo:config:version")
    time.sleep(1.2)  # both processes poll the version every 0.5 s
    first, second = serving_processes
    statuses, waits = [], []
    for url in [first, second] * 5:
        response = httpx.post(
            f"{url}/api/v1/complete",
            json={"prompt": "Say hello."},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        statuses.append(response.status_code)
        if response.status_code == 429:
            waits.append(int(response.headers["Retry-After"]))
    assert statuses == [200] * 6 + [429] * 4
    assert all(1 <= wait <= 120 for wait in waits)
    assert primary.calls == 6  # a refused request called nothing
