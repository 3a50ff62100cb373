"""The alert policy without a worker: which events are raised, kept or suppressed, and why."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from alerts.models import AlertEvent
from alerts.raising import (
    alert_raise,
    budget_crossed,
    cloud_share_check,
    failover_check,
    incident_closed,
)
from billing.models import Budget
from providers.models import Incident
from providers.selectors import policy_get
from runtime import jobs
from tests.factories import make_budget, make_call_record, make_provider
from tests.providers.conftest import ask

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def nothing_delivered(monkeypatch):
    """Delivery is the channels' business (test_delivery.py): here only what is raised."""
    handed: list[tuple] = []
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kw: handed.append(args))
    return handed


def raise_one(key: str = "static_tier") -> AlertEvent:
    return alert_raise(kind="static_tier", severity="critical", key=key, title="t", message="m")


class TestCooldown:
    def test_the_first_is_delivered_the_next_within_the_cooldown_kept_suppressed(
        self, nothing_delivered
    ):
        first, second = raise_one(), raise_one()
        assert first.status == "pending" and second.status == "suppressed"
        assert second.suppressed_reason == "cooldown"
        assert nothing_delivered == [("deliver_alert", first.pk)]

    def test_another_key_is_not_held_back(self):
        raise_one("a")
        assert raise_one("b").status == "pending"

    def test_after_the_cooldown_it_goes_out_again(self):
        first = raise_one()
        AlertEvent.objects.filter(pk=first.pk).update(
            created_at=timezone.now() - timedelta(seconds=policy_get().alert_cooldown_s + 1)
        )
        assert raise_one().status == "pending"


class TestIncidents:
    def incident(self, *, lasted_s: float | None) -> Incident:
        started = timezone.now() - timedelta(seconds=300)
        ended = None if lasted_s is None else started + timedelta(seconds=lasted_s)
        return Incident.objects.create(
            provider="ollama-local", started_at=started, ended_at=ended, reason="timeout"
        )

    def test_a_failover_still_on_after_the_flap_window_is_raised(self):
        make_provider(name="ollama-local", priority=10)
        make_provider(name="openai-cloud", kind="openai", priority=20, is_local=False)
        event = failover_check(self.incident(lasted_s=None).pk)
        assert event.status == "pending" and event.severity == "warning"
        # No request since it began says who serves: only who should.
        assert "Traffic should move to openai-cloud." in event.message

    def test_with_no_provider_left_it_is_critical(self):
        make_provider(name="ollama-local", priority=10)
        assert failover_check(self.incident(lasted_s=None).pk).severity == "critical"

    def test_it_names_the_tier_the_latest_requests_since_it_began_got(self):
        make_provider(name="ollama-local", priority=10)
        make_provider(name="openai-cloud", kind="openai", priority=20, is_local=False)
        incident = self.incident(lasted_s=None)
        before = incident.started_at - timedelta(seconds=5)
        make_call_record(final_provider="openai-cloud", tier="secondary", created_at=before)
        make_call_record(final_provider="ollama-local", tier="primary")  # a half-open probe
        make_call_record(final_provider="", tier="cache", outcome="fallback")
        event = failover_check(incident.pk)
        assert event.severity == "critical"
        assert "No provider serves: requests are answered from cached answers." in event.message

    def test_one_back_within_the_flap_window_is_kept_as_a_flap(self):
        event = failover_check(self.incident(lasted_s=10).pk)
        assert (event.status, event.suppressed_reason) == ("suppressed", "flap")

    def test_one_already_over_when_the_window_ends_is_a_flap_however_long_it_lasted(self):
        # The breaker's own minimum open time (60 s) can make a quick switch-back outlast the
        # flap window: over by the time the check runs is what counts.
        event = failover_check(self.incident(lasted_s=90).pk)
        assert (event.status, event.suppressed_reason) == ("suppressed", "flap")

    @pytest.mark.parametrize("closed_reason", ["operator", "restart"])
    def test_one_ended_by_an_operator_or_a_restart_is_kept_as_that_not_as_a_flap(
        self, closed_reason
    ):
        incident = self.incident(lasted_s=10)
        incident.closed_reason = closed_reason
        incident.save(update_fields=["closed_reason"])
        event = failover_check(incident.pk)
        assert (event.status, event.suppressed_reason) == ("suppressed", closed_reason)

    def test_recovery_follows_only_an_alerted_failover_with_length_and_spend(self):
        make_provider(name="ollama-local", priority=10)
        make_provider(name="openai-cloud", kind="openai", priority=20, is_local=False)
        incident = self.incident(lasted_s=None)
        failover_check(incident.pk)
        incident.ended_at = incident.started_at + timedelta(seconds=125)
        incident.save()
        make_call_record(
            final_provider="openai-cloud",
            cost=Decimal("0.0123"),
            created_at=incident.started_at + timedelta(seconds=5),
        )
        make_call_record(final_provider="openai-cloud", cost=Decimal("9"))  # after it: not counted
        event = incident_closed(incident)
        assert event is not None and event.kind == "recovery"
        assert "after 2 min 5 s" in event.message and "0.0123 EUR" in event.message

    def test_a_flap_gets_no_recovery_either(self):
        incident = self.incident(lasted_s=10)
        failover_check(incident.pk)
        assert incident_closed(incident) is None


class TestBudgetsAndShare:
    def test_each_level_is_raised_once_per_period(self):
        budget = make_budget(cap=Decimal("10"))
        assert budget_crossed(budget.pk, 30, "2026-11-30") is None
        fifty = budget_crossed(budget.pk, 55, "2026-11-30")
        again = budget_crossed(budget.pk, 60, "2026-11-30")
        high = budget_crossed(budget.pk, 90, "2026-11-30")
        stop = budget_crossed(budget.pk, 100, "2026-11-30")
        assert fifty.status == "pending"
        assert again is None  # raised already this period: not even a suppressed row
        assert (high.severity, stop.severity) == ("warning", "critical")
        assert budget_crossed(budget.pk, 55, "2026-12-01").status == "pending"  # a new day

    def test_cloud_share_above_target_is_raised_from_twenty_requests_on(self):
        make_provider(name="ollama-local", priority=10)
        make_provider(name="openai-cloud", kind="openai", priority=20, is_local=False)
        for _ in range(15):
            make_call_record(final_provider="ollama-local")
        for _ in range(4):
            make_call_record(final_provider="openai-cloud")
        assert cloud_share_check() is None  # 19 requests: too few to judge
        make_call_record(final_provider="openai-cloud")
        event = cloud_share_check()
        assert event is not None and "25.0 %" in event.title


async def test_a_stopped_sentinel_is_raised_and_delivered_from_here(
    gateway, nothing_delivered, monkeypatch
):
    monkeypatch.setattr(jobs, "_STARTED_AT", 0.0)  # the process has been up long enough
    await jobs.sentinel_watch_job(gateway)
    event = await sync_to_async(AlertEvent.objects.get)(kind="sentinel_down")
    assert event.severity == "critical" and "never" in event.message
    await gateway.store.sentinel_mark_run(gateway.clock.wall())
    await jobs.sentinel_watch_job(gateway)
    assert await sync_to_async(AlertEvent.objects.filter(kind="sentinel_down").count)() == 1


async def test_rejected_credentials_are_raised_from_the_request_path(api, gateway, primary):
    primary.set_fault(mode="unauthorized")
    await ask(api)
    for _ in range(50):
        if await sync_to_async(AlertEvent.objects.filter(kind="credentials").exists)():
            break
        await asyncio.sleep(0.05)
    event = await sync_to_async(AlertEvent.objects.get)(kind="credentials")
    assert event.key == "credentials:ollama-local" and event.severity == "critical"


async def failover_check_of_a_new_incident_after(api, gateway, prompt: str) -> AlertEvent:
    """An outage of the primary that began a little earlier, one real request routed through
    the gateway, then the check at the end of the flap window."""
    incident = await sync_to_async(Incident.objects.create)(
        provider="ollama-local", started_at=timezone.now() - timedelta(seconds=1), reason="refused"
    )
    await ask(api, prompt)
    await gateway.ledger.flush()
    return await sync_to_async(failover_check)(incident.pk)


async def test_a_failover_to_a_secondary_out_of_budget_names_the_static_tier(
    api, gateway, primary, secondary
):
    await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("1.00"))
    await sync_to_async(make_call_record)(
        final_provider="openai-cloud",
        tier="secondary",
        cost=Decimal("1.00"),
        created_at=timezone.now() - timedelta(seconds=30),
    )  # the day's spend, before the outage
    primary.stop()
    event = await failover_check_of_a_new_incident_after(
        api, gateway, "What are your opening hours?"
    )
    assert secondary.calls == 0
    assert "openai-cloud" not in event.message
    assert "No provider serves: requests are answered from the static answers." in event.message
    assert event.severity == "critical"


async def test_a_failover_to_a_serving_secondary_names_it(api, gateway, primary, secondary):
    primary.stop()
    event = await failover_check_of_a_new_incident_after(api, gateway, "Write a limerick.")
    assert secondary.calls == 1
    assert "Traffic moves to openai-cloud." in event.message and event.severity == "warning"
