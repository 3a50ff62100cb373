"""A sentinel verdict reaches the operator in both modes: the serving process's own scheduler
(embedded), and a real Celery worker running the sentinel's task (services)."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from devtools.fake_receiver import FakeReceiver
from failover_site.celery import app as celery_app
from providers.models import Provider
from runtime.scheduler import InProcessScheduler, serving_process_jobs
from tests.alerts.builders import TELEGRAM_TOKEN, TELEGRAM_TOKEN_ENV, telegram_channel
from tests.alerts.test_alerts_on_celery import celery_worker  # noqa: F401 - a fixture
from tests.providers.conftest import update_policy

pytestmark = pytest.mark.django_db(transaction=True)


async def degraded_texts(receiver: FakeReceiver, *, within_s: float) -> list[str]:
    deadline = time.monotonic() + within_s
    while True:
        found = [m.rendered for m in receiver.messages_to("/bot") if "degraded" in m["text"]]
        if found:
            return found
        assert time.monotonic() < deadline, "no degraded alert reached Telegram"
        await asyncio.sleep(0.05)


async def a_model_gone_with_a_runbook(gateway, primary) -> None:
    # One failed check is enough here: the window's rule has its own tests.
    await update_policy(gateway, sentinel_window=1, sentinel_degraded_after=1)
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(
        runbook="ollama pull llama3.1:8b"
    )
    primary.set_fault(models=["mistral:7b"])


async def test_embedded_the_serving_process_raises_and_delivers_it(
    settings, monkeypatch, gateway, primary
):
    settings.BACKGROUND_JOBS = "inprocess"
    monkeypatch.setenv(TELEGRAM_TOKEN_ENV, TELEGRAM_TOKEN)
    await a_model_gone_with_a_runbook(gateway, primary)
    with FakeReceiver() as receiver:
        await sync_to_async(telegram_channel)(receiver, name="ops-telegram")
        scheduler = InProcessScheduler(gateway, serving_process_jobs())
        scheduler.start()
        try:
            [text] = await degraded_texts(receiver, within_s=10)
        finally:
            await scheduler.stop()
    assert text.startswith(
        "[WARNING] ollama-local degraded: 1/1 health checks failed: model llama3.1:8b is not "
        "pulled\n\nollama-local had no recent verdict; now degraded"
    )
    assert text.endswith("Runbook\nollama pull llama3.1:8b")


@pytest.mark.services
async def test_on_celery_the_worker_raises_and_delivers_it(celery_worker, gateway, primary):  # noqa: F811
    await a_model_gone_with_a_runbook(gateway, primary)
    with FakeReceiver() as receiver:
        await sync_to_async(telegram_channel)(receiver, name="ops-telegram")
        celery_app.send_task("failover.sentinel")
        [text] = await degraded_texts(receiver, within_s=20)
    assert "ollama-local degraded: 1/1 health checks failed" in text
    assert "Cloud spend: 0.0000 EUR today, 0.0000 EUR this month." in text
    assert text.endswith("Runbook\nollama pull llama3.1:8b")
