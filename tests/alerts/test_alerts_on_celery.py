"""Alerts end to end on a real Celery worker and the Redis broker: the router sees a provider
fail, the breaker opens, and a local fake Telegram hears about it (once, after the flap window);
and what the alert policy keeps from being sent."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from alerts.models import AlertChannel, AlertEvent
from alerts.raising import incident_opened, static_tier_active
from devtools.fake_receiver import FakeReceiver
from providers.models import Incident
from tests.alerts.builders import TELEGRAM_TOKEN, TELEGRAM_TOKEN_ENV, telegram_channel
from tests.conftest import child_process_env
from tests.providers.conftest import ask, update_policy

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def celery_worker(gateway, tmp_path, monkeypatch) -> Iterator[None]:
    """A real worker process on the test database and the test Redis as its broker."""
    from django.conf import settings

    assert settings.BACKGROUND_JOBS == "celery"
    monkeypatch.setenv(TELEGRAM_TOKEN_ENV, TELEGRAM_TOKEN)
    env = child_process_env(tmp_path, **{TELEGRAM_TOKEN_ENV: TELEGRAM_TOKEN})
    log_path = tmp_path / "celery.log"
    log = log_path.open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "failover_site", "worker", "--pool=solo",
         "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "ready." not in log_path.read_text():
            assert worker.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the Celery worker did not start"
            time.sleep(0.1)
        yield
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        log.close()


@pytest.fixture
def telegram(celery_worker) -> Iterator[FakeReceiver]:
    with FakeReceiver() as receiver:
        telegram_channel(receiver, name="ops-telegram")
        yield receiver


async def wait_for(predicate, *, within_s: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + within_s
    while not await sync_to_async(predicate)():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.1)


def texts(receiver: FakeReceiver) -> list[str]:
    return [message["text"] for message in receiver.messages_to("/bot")]


async def open_the_primarys_breaker(api, primary) -> None:
    primary.stop()
    for _ in range(3):  # three refused calls in a row
        assert (await ask(api, "Say hello.", cache=False)).json()["tier"] == "secondary"


async def test_a_failover_sends_one_message_after_the_flap_window(api, telegram, primary, gateway):
    await update_policy(gateway, flap_window_s=1)
    await open_the_primarys_breaker(api, primary)
    await wait_for(lambda: len(texts(telegram)) >= 1, what="the failover message")
    await asyncio.sleep(1.5)  # nothing else follows
    [text] = texts(telegram)
    assert "Failover: ollama-local is out" in text
    assert "Traffic moves to openai-cloud" in text


async def test_recovery_sends_one_message_with_its_length_and_the_cloud_spend(
    api, telegram, primary, clock, gateway
):
    await update_policy(gateway, flap_window_s=1, cooldown_s=1, half_open_probes=1)
    await open_the_primarys_breaker(api, primary)
    await wait_for(lambda: len(texts(telegram)) == 1, what="the failover message")
    primary.start()
    clock.advance(95)  # the breaker's cooldown, and the incident's length
    assert (await ask(api, "Say hello.", cache=False)).json()["tier"] == "primary"  # the probe
    await wait_for(lambda: len(texts(telegram)) == 2, what="the recovery message")
    recovery = texts(telegram)[1]
    assert "Recovered: ollama-local is back" in recovery
    assert "after 1 min 35 s" in recovery and "Cloud spend during the incident" in recovery
    incident = await sync_to_async(Incident.objects.get)()
    assert incident.ended_at is not None


async def test_a_switch_back_within_the_flap_window_sends_nothing(
    api, telegram, primary, clock, gateway
):
    await update_policy(gateway, flap_window_s=3, cooldown_s=1, half_open_probes=1)
    await open_the_primarys_breaker(api, primary)
    primary.start()
    clock.advance(1.5)
    assert (await ask(api, "Say hello.", cache=False)).json()["tier"] == "primary"
    await wait_for(
        lambda: AlertEvent.objects.filter(suppressed_reason="flap").exists(),
        what="the failover judged a flap",
    )
    assert texts(telegram) == []


async def test_ten_failovers_in_five_minutes_are_one_message(telegram, gateway):
    await update_policy(gateway, flap_window_s=1, alert_cooldown_s=300)

    def ten_incidents() -> None:
        from django.utils import timezone

        for _ in range(10):
            incident_opened(
                Incident.objects.create(provider="ollama-local", started_at=timezone.now())
            )

    await sync_to_async(ten_incidents)()
    await wait_for(
        lambda: AlertEvent.objects.filter(kind="failover").count() == 10,
        what="ten failovers judged",
    )
    await asyncio.sleep(1.0)
    assert len(texts(telegram)) == 1
    suppressed = await sync_to_async(
        AlertEvent.objects.filter(kind="failover", suppressed_reason="cooldown").count
    )()
    assert suppressed == 9


async def test_a_channel_answering_401_is_disabled_with_the_error_shown(telegram):
    telegram.set_mode("unauthorized")
    event = await sync_to_async(static_tier_active)("all_providers_failed")
    await wait_for(
        lambda: AlertEvent.objects.get(pk=event.pk).status == "failed", what="delivery failed"
    )
    channel = await sync_to_async(AlertChannel.objects.get)(name="ops-telegram")
    assert channel.enabled is False and channel.disabled_reason
    assert "401" in channel.last_error or "Unauthorized" in channel.last_error
    assert len(telegram.messages_to("/bot")) == 1  # a permanent error isn't retried


async def test_a_channel_answering_500_is_retried_then_recorded_failed(telegram):
    telegram.set_mode("error")
    event = await sync_to_async(static_tier_active)("all_providers_failed")
    await wait_for(
        lambda: AlertEvent.objects.get(pk=event.pk).status == "failed", what="delivery failed"
    )
    channel = await sync_to_async(AlertChannel.objects.get)(name="ops-telegram")
    assert channel.enabled is True and channel.last_error
    assert len(telegram.messages_to("/bot")) == 3
    delivered = await sync_to_async(AlertEvent.objects.get)(pk=event.pk)
    assert delivered.deliveries[0]["attempts"] == 3


async def test_a_hanging_channel_doesnt_hold_up_routing(api, telegram, primary, secondary, gateway):
    telegram.set_mode("hang")
    await update_policy(gateway, flap_window_s=1)
    await open_the_primarys_breaker(api, primary)
    secondary.stop()  # every request now reaches the static tier: a critical alert each time
    await sync_to_async(static_tier_active)("all_providers_failed")
    for _ in range(5):
        started = time.monotonic()
        assert (await ask(api, "What are your office hours?")).json()["tier"] == "static"
        assert time.monotonic() - started < 1.0  # the channel hangs for seconds meanwhile
