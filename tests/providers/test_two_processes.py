"""Two real serving processes on one Redis behave as one breaker."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings
from django.db.models import Sum

from billing.models import CallRecord
from devtools.ports import free_port
from gateway.adapters.messages import CompletionRequest
from gateway.engine.budgets import prompt_tokens_reserved
from gateway.state.contract import spend_key
from gateway.state.redis_store import RedisStore
from providers.selectors import policy_get
from tests.conftest import child_process_env
from tests.factories import AUTH, make_client_app

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.django_db(transaction=True)]


class ServingProcesses(list):
    """The processes' URLs, and a way to kill the first as a crash would."""

    def __init__(self, urls: list[str], processes: list[subprocess.Popen]) -> None:
        super().__init__(urls)
        self.processes = processes

    def kill_first(self) -> None:
        self.processes[0].kill()
        self.processes[0].wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, as a deploy stops them: the lifespan's shutdown runs."""
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            process.wait(timeout=20)


@pytest.fixture
def serving_processes(providers_configured, tmp_path):
    """Two uvicorn processes on the test database and the test Redis."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    env = child_process_env(tmp_path)
    processes, urls = [], []
    for _ in range(2):
        port = free_port()
        log = (tmp_path / f"uvicorn-{port}.log").open("w")
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
                 "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
                 "--loop", "failover_site.event_loop:new_event_loop"],
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
        yield ServingProcesses(urls, processes)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)  # lifespan shutdown flushes the ledger
        for process in processes:
            process.wait(timeout=20)
        redis.Redis.from_url(settings.REDIS_URL).flushdb()


def _announce_change(urls: list[str]) -> None:
    """Tell the processes of a change as the admin does (the version moves in Redis), then wait
    until each serves it: they poll the version every 0.5 s, later on a busy machine."""
    version = redis.Redis.from_url(settings.REDIS_URL).incr("fo:config:version")
    deadline = time.monotonic() + 20
    for url in urls:
        while True:
            response = httpx.get(f"{url}/api/v1/status", headers=AUTH, timeout=5)
            assert response.status_code == 200, response.text
            serving = response.json()["config_version"]
            if serving >= version:
                break
            assert time.monotonic() < deadline, f"{url} still serves version {serving} of {version}"
            time.sleep(0.05)


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
    _announce_change(serving_processes)  # no admin here
    first, second = serving_processes
    primary.set_fault(mode="error")
    for _ in range(3):
        _ask(first)
    calls_when_opened = primary.calls
    # The probes answer well after the whole burst has been routed, however busy the machine:
    # a request routed once they had closed the breaker would be a fourth call, rightly.
    primary.set_fault(mode="slow", delay_ms=1500)
    time.sleep(1.2)  # the cooldown (1 s) passes

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
    # Three probe calls in all: the requests' and those each process's recovery job sends the
    # moment the cooldown ends (a one-token check each) share the same three slots.
    assert primary.calls - calls_when_opened == 3
    assert sum(a["provider"] == "ollama-local" for a in answers) <= 3


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
    _announce_change(serving_processes)
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


def _paid_only(urls: list[str], cap: str, **policy_values) -> int:
    """The cloud provider alone, at prices where "Say hello." with `ONE_CENT_TOKENS` answer
    tokens holds exactly 0.01; a day's budget of `cap` for all traffic."""
    from billing.models import Budget
    from providers.models import Provider

    Provider.objects.filter(name="ollama-local").update(enabled=False)
    Provider.objects.filter(name="openai-cloud").update(
        price_input_per_1m=Decimal("100"), price_output_per_1m=Decimal("100")
    )
    budget = Budget.objects.create(scope="all", period="day", cap=Decimal(cap))
    policy = policy_get()
    for name, value in policy_values.items():
        setattr(policy, name, value)
    policy.save()
    _announce_change(urls)
    return budget.pk


ONE_CENT_TOKENS = 100 - prompt_tokens_reserved(CompletionRequest(prompt="Say hello.").all_text(), 1)


def _holds(budget_id: int) -> tuple[int, float]:
    store = RedisStore(settings.REDIS_URL)

    async def read() -> tuple[int, float]:
        try:
            key = spend_key(budget_id, "day", time.time())[0]
            return (await store.holds_read([key], now=time.time()))[key]
        finally:
            await store.aclose()

    return asyncio.run(read())


def test_a_budget_holds_under_concurrent_requests_across_processes(serving_processes, secondary):
    budget_id = _paid_only(serving_processes, "0.10")
    secondary.set_fault(mode="slow", delay_ms=500)
    first, second = serving_processes
    body = {"prompt": "Say hello.", "max_tokens": ONE_CENT_TOKENS, "priority": "high",
            "cache": False}  # fmt: skip

    async def burst() -> list[dict]:
        async with httpx.AsyncClient(timeout=20, headers=AUTH) as client:
            responses = await asyncio.gather(
                *(client.post(f"{url}/api/v1/complete", json=body) for url in [first, second] * 25)
            )
        return [r.json() for r in responses]

    answers = asyncio.run(burst())
    paid = [a for a in answers if a.get("provider") == "openai-cloud"]
    # Each holds exactly 0.01: the cap admits ten, however the 50 fall across the processes.
    assert len(paid) == 10
    assert secondary.calls == len(paid)
    ids = {a["request_id"] for a in paid}
    # Stopped as a deploy stops them: each gives back the room it kept for its next calls and
    # writes the rest of its ledger.
    serving_processes.stop()
    assert _holds(budget_id) == (0, 0.0)  # every hold settled or released
    rows = CallRecord.objects.filter(request_id__in=ids)
    assert rows.count() == len(ids)
    spent = rows.aggregate(total=Sum("cost"))["total"]
    assert 0 < spent <= Decimal("0.10")  # each used less than it held


def test_a_hold_left_by_a_process_killed_mid_call_lapses(serving_processes, secondary):
    budget_id = _paid_only(serving_processes, "0.01", request_deadline_s=1.0)
    secondary.set_fault(mode="slow", delay_ms=3000)
    first, second = serving_processes
    body = {"prompt": "Say hello.", "max_tokens": ONE_CENT_TOKENS, "priority": "high",
            "cache": False}  # fmt: skip

    async def killed_mid_call() -> None:
        async with httpx.AsyncClient(timeout=10, headers=AUTH) as client:
            call = asyncio.ensure_future(client.post(f"{first}/api/v1/complete", json=body))
            while secondary.calls == 0:
                await asyncio.sleep(0.02)
            serving_processes.kill_first()
            with pytest.raises(httpx.TransportError):
                await call

    asyncio.run(killed_mid_call())
    assert _holds(budget_id)[0] == 1  # its process is gone; the whole cent is still held
    refused = httpx.post(f"{second}/api/v1/complete", json=body, headers=AUTH, timeout=10)
    assert refused.json().get("provider") != "openai-cloud"
    # The hold lapses at the call's longest (the 1 s deadline) plus one deadline more.
    time.sleep(2.5)
    secondary.set_fault(mode="ok")
    answered = httpx.post(f"{second}/api/v1/complete", json=body, headers=AUTH, timeout=10)
    assert answered.json()["provider"] == "openai-cloud", answered.json()
    assert _holds(budget_id) == (0, 0.0)
