"""The embedded mode: the same jobs without Celery. A serving process raises and delivers the
alerts itself (its threads), and runs the periodic jobs on its own loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from alerts.models import AlertEvent
from devtools.fake_receiver import FakeReceiver
from runtime.scheduler import InProcessScheduler, Periodic, serving_process_jobs
from tests.alerts.builders import TELEGRAM_TOKEN, TELEGRAM_TOKEN_ENV, telegram_channel
from tests.providers.conftest import ask, update_policy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def in_process(settings, monkeypatch):
    settings.BACKGROUND_JOBS = "inprocess"
    monkeypatch.setenv(TELEGRAM_TOKEN_ENV, TELEGRAM_TOKEN)


@pytest.fixture
async def telegram(in_process, gateway):
    with FakeReceiver() as receiver:
        await sync_to_async(telegram_channel)(receiver, name="ops-telegram")
        yield receiver


async def eventually(predicate, *, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not await sync_to_async(predicate)():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


async def test_a_failover_is_alerted_from_the_serving_process(api, telegram, primary, gateway):
    await update_policy(gateway, flap_window_s=1)
    primary.stop()
    for _ in range(3):
        assert (await ask(api, "Say hello.", cache=False)).json()["tier"] == "secondary"
    await eventually(lambda: len(telegram.messages_to("/bot")) == 1)
    assert "Failover: ollama-local is out" in telegram.messages_to("/bot")[0]["text"]
    # The delivery records its result just after the send.
    await eventually(lambda: AlertEvent.objects.get(kind="failover").status == "delivered")


async def test_the_static_tier_raises_one_critical_alert(api, telegram, primary, secondary):
    primary.stop()
    secondary.stop()
    for _ in range(5):
        assert (await ask(api, "What are your office hours?")).json()["tier"] == "static"
    await eventually(lambda: AlertEvent.objects.filter(kind="static_tier").exists())
    await eventually(lambda: len(telegram.messages_to("/bot")) >= 1)
    await asyncio.sleep(0.3)
    static = [m for m in telegram.messages_to("/bot") if "static answers only" in m["text"]]
    assert len(static) == 1


def test_the_serving_process_runs_every_job_itself(in_process):
    names = {periodic.name for periodic in serving_process_jobs()}
    assert names == {"recovery", "sentinel", "keepalive", "watchdog", "housekeeping"}


def test_with_celery_it_only_watches_the_sentinel_and_probes_at_cooldown_end(settings):
    settings.BACKGROUND_JOBS = "celery"
    names = [periodic.name for periodic in serving_process_jobs()]
    assert names == ["sentinel_watch", "recovery"]


async def test_the_scheduler_runs_its_jobs_and_survives_a_failing_one(gateway):
    runs: list[str] = []

    async def good(_gateway) -> None:
        runs.append("good")

    async def bad(_gateway) -> None:
        runs.append("bad")
        raise RuntimeError("a job's own bug")

    scheduler = InProcessScheduler(
        gateway, (Periodic("good", good, 0.05), Periodic("bad", bad, 0.05))
    )
    scheduler.start()
    await asyncio.sleep(0.3)
    await scheduler.stop()
    assert runs.count("good") >= 3 and runs.count("bad") >= 3


async def test_the_embedded_scheduler_runs_the_real_sentinel(in_process, gateway, primary):
    primary.set_fault(mode="error", scope="all")
    scheduler = InProcessScheduler(gateway, serving_process_jobs())
    scheduler.start()
    try:
        # A run ends by marking itself (after every provider's check is recorded): stopping
        # the scheduler before that would cancel the run between the two.
        deadline = time.monotonic() + 10
        while await gateway.store.sentinel_last_run() is None:
            assert time.monotonic() < deadline, "the sentinel never finished a run"
            await asyncio.sleep(0.05)
        found = await gateway.store.health_read(["ollama-local", "openai-cloud"])
    finally:
        await scheduler.stop()
    assert found["ollama-local"].window == (False,)  # its check failed
    assert found["openai-cloud"].window == (True,)


async def test_stopping_ends_a_job_caught_in_a_database_call(gateway):
    # A database call (`sync_to_async`) finishes what it does and swallows the cancellation;
    # the scheduler must stop all the same, or the shutdown never reaches the ledger's flush.
    inside = asyncio.Event()

    def database_call() -> None:  # sync code that awaits something of its own, as ORM code may
        async_to_sync(asyncio.sleep)(0.3)

    async def database_job(_gateway) -> None:
        inside.set()
        await sync_to_async(database_call)()

    scheduler = InProcessScheduler(gateway, (Periodic("database", database_job, 0.01),))
    scheduler.start()
    await inside.wait()
    await asyncio.wait_for(scheduler.stop(), timeout=5)


async def test_a_job_that_ignores_the_stop_is_left_behind_and_the_shutdown_goes_on(
    gateway, monkeypatch, caplog
):
    monkeypatch.setattr(InProcessScheduler, "STOP_TIMEOUT_S", 0.2)
    release = asyncio.Event()

    async def stubborn(_gateway) -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)

    scheduler = InProcessScheduler(gateway, (Periodic("stubborn", stubborn, 0.01),))
    scheduler.start()
    await asyncio.sleep(0.05)
    await asyncio.wait_for(scheduler.stop(), timeout=3)
    assert "did not stop in time" in caplog.text
    release.set()  # let it end, so the test leaves no task behind
    await asyncio.sleep(0.1)
