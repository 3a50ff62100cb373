# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""`GET /metrics` across processes: prometheus-client's multi-process mode sums what every
process counted into one directory, keeps a dead process's counts and drops its live gauges."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from tests.conftest import child_process_env
from tests.factories import AUTH
from tests.failover_site.test_metrics import (
    SCRAPER,
    TOKEN,
    parse,
    scrape,
    token_only,  # noqa: F401 - a fixture, by name
    value,
)
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    api,
    clock,
    gateway,
    primary,
    providers_configured,
    secondary,
)
from tests.serving import uvicorn_serving

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)

COUNTING_CHILD = """
import os, sys
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")
django.setup()
from runtime.metrics import LEDGER_QUEUE, count_request
from gateway.routing.cascade import RouteResult
from gateway.routing.walk import Attempt

requests, queue, stay = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "stay"
for _ in range(requests):
    attempt = Attempt("ollama-local", "ok", latency_ms=300)
    count_request(
        RouteResult(text="hi", tier="primary", provider="ollama-local", attempts=[attempt]),
        cloud=False,
    )
LEDGER_QUEUE.set(queue)
print("counted", flush=True)
if stay:
    sys.stdin.read()
"""


def counting_child(directory: Path, requests: int, queue: int, *, stay: bool):
    env = {**os.environ, "ENV_FILE": "", "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    child = subprocess.Popen(
        [sys.executable, "-c", COUNTING_CHILD, str(requests), str(queue), "stay" if stay else ""],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "counted"
    return child


async def test_in_multiprocess_mode_a_scrape_sums_every_processs_counts(
    api, token_only, tmp_path, monkeypatch
):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    gone = counting_child(directory, 3, queue=7, stay=False)
    gone.wait(timeout=30)
    alive = counting_child(directory, 4, queue=5, stay=True)
    try:
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
        samples = await scrape(api)
    finally:
        alive.communicate("", timeout=30)
    served = {"provider": "ollama-local", "tier": "primary", "outcome": "ok"}
    assert value(samples, "failover_requests_total", **served) == 7  # 3 + 4
    assert value(samples, "failover_provider_latency_seconds_count", provider="ollama-local") == 7
    # A process's queue is its own: the live one's counts, the exited one's is dropped.
    assert value(samples, "failover_ledger_queue_rows") == 5


@pytest.mark.services
async def test_two_serving_processes_on_one_directory_report_the_same_totals(
    providers_configured, tmp_path
):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = child_process_env(tmp_path, PROMETHEUS_MULTIPROC_DIR=str(directory), METRICS_TOKEN=TOKEN)
    processes, urls = [], []
    try:
        for _ in range(2):
            url, process = await asyncio.to_thread(uvicorn_serving, env, tmp_path)
            processes.append(process)
            urls.append(url)
        async with httpx.AsyncClient(timeout=15, headers=AUTH) as http:
            for url, times in zip(urls, (2, 3), strict=True):
                for _ in range(times):
                    answer = await http.post(f"{url}/api/v1/complete", json={"prompt": "Hi."})
                    assert answer.json()["tier"] == "primary", answer.text
            served = {"provider": "ollama-local", "tier": "primary", "outcome": "ok"}
            for url in urls:
                response = await http.get(f"{url}/metrics", headers=SCRAPER)
                assert response.status_code == 200, response.text
                samples = parse(response.text)[0]
                assert value(samples, "failover_requests_total", **served) == 5, url
                assert ("failover_ledger_queue_rows", frozenset()) in samples
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
