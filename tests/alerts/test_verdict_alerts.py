"""The sentinel's own verdicts raise alerts: a provider degraded, then down, then healthy again,
from real checks of the fake providers over loopback with a moved clock, with the previous
state, the failing checks, how long it has been degraded, the cloud spend and the runbook."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from alerts.models import AlertEvent
from alerts.outlook import cloud_spend_today_and_month
from alerts.verdicts import VerdictMove, failing_checks, verdict_moved
from gateway.sentinel.checks import sentinel_run
from providers.models import Provider
from providers.selectors import policy_get
from runtime.jobs import keepalive_job, sentinel_job, verdict_alert
from tests.factories import make_call_record
from tests.providers.conftest import update_policy

pytestmark = pytest.mark.django_db(transaction=True)

RUNBOOK = "systemctl status ollama\n\n  journalctl -u ollama -n 50\n"
MISSING = "model llama3.1:8b is not pulled"


@pytest.fixture
def nothing_delivered(monkeypatch):
    """Delivery is the channels' business (test_delivery.py): here only what is raised."""
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kwargs: None)


def moved(**overrides) -> VerdictMove:
    values = {
        "provider": "ollama-local",
        "status": "degraded",
        "previous": "healthy",
        "previous_since": 0.0,
        "at": 1_780_000_000.0,
        "window": (True, True, False, False, False),
        "detail": MISSING,
    }
    values.update(overrides)
    return VerdictMove(**values)


class TestWhatIsWorthAnAlert:
    def test_into_and_out_of_degraded_or_down_but_not_a_first_healthy(self):
        assert moved(status="degraded", previous="healthy").worth_alerting
        assert moved(status="degraded", previous="unknown").worth_alerting
        assert moved(status="down", previous="degraded").worth_alerting
        assert moved(status="healthy", previous="down").worth_alerting
        assert not moved(status="healthy", previous="unknown").worth_alerting
        assert not moved(status="degraded", previous="degraded").worth_alerting

    def test_the_failing_checks_come_from_the_window_and_the_last_detail(self):
        assert failing_checks(moved()) == f"3/5 health checks failed: {MISSING}"
        passed = moved(window=(False, False, False, False, True), detail="")
        assert failing_checks(passed) == "4/5 health checks failed (the latest passed)"


def test_the_spend_is_the_cloud_s_today_and_this_month_in_the_policys_time_zone():
    policy = policy_get()
    policy.time_zone = "Europe/Berlin"
    Provider.objects.create(name="local", kind="ollama", base_url="http://127.0.0.1:9",
                            model="m", is_local=True)  # fmt: skip
    now = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)  # 03:00 in Berlin
    for created, provider, cost in [
        (datetime(2026, 11, 19, 23, 30, tzinfo=UTC), "openai-cloud", "0.25"),  # 00:30 today
        (datetime(2026, 11, 19, 22, 30, tzinfo=UTC), "openai-cloud", "1.00"),  # 23:30 yesterday
        (datetime(2026, 10, 31, 22, 30, tzinfo=UTC), "openai-cloud", "9.00"),  # 23:30 Oct 31
        (datetime(2026, 11, 20, 1, 0, tzinfo=UTC), "local", "5.00"),  # self-hosted
    ]:
        make_call_record(final_provider=provider, cost=Decimal(cost), created_at=created)
    assert cloud_spend_today_and_month(policy, now) == (Decimal("0.25"), Decimal("1.25"))


async def sentinel_round(gateway) -> None:
    """One run of the checks, and the verdict alerts the sentinel's job raises from them."""
    for found in await sentinel_run(gateway):
        await verdict_alert(found)


def health_events() -> list[AlertEvent]:
    return list(AlertEvent.objects.filter(kind="health").order_by("created_at", "id"))


async def test_degraded_then_down_then_healthy_each_say_what_the_operator_needs(
    gateway, clock, primary, secondary, nothing_delivered
):
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(runbook=RUNBOOK)
    await sync_to_async(make_call_record)(
        final_provider="openai-cloud", tier="secondary", cost=Decimal("0.0123")
    )
    for _ in range(2):  # two good checks, then the model is gone
        await sentinel_round(gateway)
        clock.advance(30)
    primary.set_fault(models=["mistral:7b"])
    for _ in range(3):
        await sentinel_round(gateway)
        degraded_at = clock.now
        clock.advance(30)

    [degraded] = await sync_to_async(health_events)()
    at = datetime.fromtimestamp(degraded_at, UTC)
    assert degraded.severity == "warning" and degraded.key == "health:ollama-local:degraded"
    assert degraded.title == f"ollama-local degraded: 3/5 health checks failed: {MISSING}"
    assert degraded.message.splitlines() == [
        f"ollama-local was healthy; now degraded (since {at:%H:%M:%S} UTC): 3/5 health checks "
        f"failed: {MISSING}.",
        "High-priority requests go to the next provider; the others stay. It is down (skipped by "
        "every request) after 5 min degraded.",
        "Cloud spend: 0.0123 EUR today, 0.0123 EUR this month.",
    ]
    assert degraded.data["runbook"] == ["systemctl status ollama", "  journalctl -u ollama -n 50"]

    while clock.now <= degraded_at + 300:  # degraded for the policy's 5 minutes
        await sentinel_round(gateway)
        clock.advance(30)
    events = await sync_to_async(health_events)()
    down = events[-1]
    assert [e.data["status"] for e in events] == ["degraded", "down"]
    assert (
        down.severity == "critical" and down.title == "ollama-local down: skipped by every request"
    )
    assert down.message.splitlines()[:2] == [
        f"ollama-local was degraded for 5 min (since {at:%H:%M:%S} UTC); now down: 5/5 health "
        f"checks failed: {MISSING}.",
        "Every request skips it until the last 5 health checks have all passed.",
    ]
    assert down.data["runbook"] == degraded.data["runbook"]
    assert down.data["cloud_spend_month"] == "0.0123"

    primary.reset()
    for _ in range(5):  # back only on a clean window
        clock.advance(30)
        await sentinel_round(gateway)
    events = await sync_to_async(health_events)()
    back = events[-1]
    assert [e.data["status"] for e in events] == ["degraded", "down", "healthy"]
    lasted = round((clock.now - degraded_at) / 60)
    assert back.severity == "info" and back.title == "ollama-local healthy again"
    assert back.message.splitlines()[0] == (
        f"ollama-local was down (degraded or down for {lasted} min, since {at:%H:%M:%S} UTC); "
        "the last 5 health checks passed."
    )
    assert "runbook" not in back.data
    # The secondary's checks all passed: its first verdict raised nothing.
    assert not [e for e in events if e.data["provider"] == "openai-cloud"]


async def test_the_same_verdict_again_within_the_cooldown_is_kept_not_sent(
    gateway, clock, primary, secondary, nothing_delivered
):
    await update_policy(gateway, sentinel_window=1, sentinel_degraded_after=1)
    for fault in (
        ["mistral:7b"],
        ["llama3.1:8b"],
        ["mistral:7b"],
        ["llama3.1:8b"],
    ):  # degraded, back, degraded, back
        primary.set_fault(models=fault)
        await sentinel_round(gateway)
        clock.advance(30)
    events = await sync_to_async(health_events)()
    assert [(e.data["status"], e.status) for e in events] == [
        ("degraded", "pending"),
        ("healthy", "pending"),
        ("degraded", "suppressed"),
        # Its degraded alert was held back by the cooldown, behind one that went out.
        ("healthy", "suppressed"),
    ]
    assert events[2].suppressed_reason == "cooldown"


async def test_a_recovery_nobody_heard_the_trouble_of_raises_nothing(gateway, nothing_delivered):
    event = await sync_to_async(verdict_moved)(moved(status="healthy", previous="degraded"))
    assert event is None


async def test_the_sentinels_job_raises_them_itself(
    gateway, clock, primary, secondary, nothing_delivered
):
    await update_policy(gateway, sentinel_window=1, sentinel_degraded_after=1)
    primary.set_fault(models=["mistral:7b"])
    assert await sentinel_job(gateway) is not None  # this caller's turn
    [event] = await sync_to_async(health_events)()
    assert event.data["status"] == "degraded" and event.data["previous"] == "unknown"
    assert event.message.startswith("ollama-local had no recent verdict; now degraded")


async def test_a_keepalive_ping_that_moves_the_secondarys_verdict_raises_it_too(
    gateway, primary, secondary, nothing_delivered
):
    await update_policy(
        gateway, keepalive_enabled=True, sentinel_window=1, sentinel_degraded_after=1
    )
    secondary.set_fault(mode="error", status=503)
    assert await keepalive_job(gateway) == "pinged: failed (server_error)"
    [event] = await sync_to_async(health_events)()
    assert event.key == "health:openai-cloud:degraded"
    assert event.title.startswith(
        "openai-cloud degraded: 1/1 health checks failed: keepalive ping failed: server_error"
    )
