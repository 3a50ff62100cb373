"""The cascade end to end: the real ASGI app, the real router, fake providers over loopback.
The routing decisions themselves are tested at `route()` (`test_breaker_cycle.py`,
`test_routing_policy.py`)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from billing.models import Budget, CallRecord
from gateway.engine.breaker import State
from providers.models import Provider
from runtime import snapshots as snapshots_module
from tests.providers.conftest import (
    ask,
    ledger_rows,
    round_trips_of_steady_requests,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def test_the_primary_answers_when_healthy(api, gateway, primary, secondary):
    response = await ask(api)
    body = response.json()
    assert response.status_code == 200
    assert body["text"] == "Hello from the local model."
    assert (body["provider"], body["tier"], body["is_fallback"]) == (
        "ollama-local",
        "primary",
        False,
    )
    assert body["degradation_notice"] is None and body["tokens_out"] > 0
    assert response.headers["X-Failover-Provider"] == "ollama-local"
    assert response.headers["X-Failover-Tier"] == "primary"
    assert response.headers["X-Request-Id"] == body["request_id"]
    assert (primary.calls, secondary.calls) == (1, 0)


async def test_primary_refused_the_secondary_answers_and_the_ledger_says_why(
    api, gateway, primary, secondary
):
    primary.stop()
    response = await ask(api)
    body = response.json()
    assert (body["provider"], body["tier"]) == ("openai-cloud", "secondary")
    assert body["text"] == "Hello from the cloud model."
    [record] = await ledger_rows(gateway)
    assert str(record.request_id) == body["request_id"]
    assert (record.final_provider, record.tier, record.outcome) == (
        "openai-cloud",
        "secondary",
        "ok",
    )
    assert record.reason == "primary_refused"
    assert [(a["provider"], a["outcome"]) for a in record.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "ok"),
    ]
    assert record.attempts[0]["error_class"] == "refused"
    assert record.cost > 0 and record.tokens_in > 0


async def test_both_down_a_static_answer_comes_back_marked_as_fallback(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error", status=503)
    response = await ask(api, "What are your opening hours?")
    body = response.json()
    assert response.status_code == 200
    assert (body["tier"], body["provider"], body["is_fallback"]) == ("static", None, True)
    assert "09:00" in body["text"]
    assert body["degradation_notice"]
    assert response.headers["X-Failover-Tier"] == "static"
    [record] = await ledger_rows(gateway)
    assert record.static_answer_id is not None and record.outcome == "fallback"
    hits = await sync_to_async(
        lambda: record.static_answer.__class__.objects.get(pk=record.static_answer_id)
    )()
    assert hits.hit_count == 1 and hits.last_hit_at is not None


async def test_no_static_match_gets_the_degradation_message(api, gateway, primary, secondary):
    primary.stop()
    secondary.stop()
    body = (await ask(api, "Write me a sonnet about turnips.")).json()
    assert body["tier"] == "degraded" and body["is_fallback"] is True
    assert body["text"].startswith("Sorry, our assistant is temporarily unavailable")


async def test_the_secondarys_400_goes_back_to_the_client_with_no_failover(
    api, gateway, primary, secondary
):
    with_third = await sync_to_async(Provider.objects.create)(
        name="third", kind="openai", base_url=secondary.url, model="gpt-4o-mini", priority=30
    )
    assert with_third.pk
    primary.stop()
    secondary.set_fault(mode="bad_request")
    response = await ask(api)
    body = response.json()
    assert response.status_code == 400
    assert (
        body["error"]["code"] == "invalid_request" and body["error"]["provider"] == "openai-cloud"
    )
    assert secondary.calls == 1  # the third provider (same fake) was not asked
    [record] = await ledger_rows(gateway)
    assert (record.status, record.outcome, record.tier) == (400, "rejected", "none")


async def _spent_today(amount: str) -> None:
    await sync_to_async(CallRecord.objects.create)(
        final_provider="openai-cloud",
        tier="secondary",
        outcome="ok",
        status=200,
        cost=Decimal(amount),
    )


async def _budget(cap: str) -> None:
    await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal(cap))


async def test_a_budget_at_100_percent_skips_the_cloud_provider(api, gateway, primary, secondary):
    await _budget("1.00")
    await _spent_today("1.00")  # the ledger is the truth the counters start from
    primary.stop()
    body = (await ask(api, "Write a limerick.", priority="high")).json()
    assert body["tier"] == "degraded"
    assert secondary.calls == 0
    records = await ledger_rows(gateway)
    assert records[-1].attempts[1]["error_class"] == "budget_exhausted"


async def test_a_budget_at_85_percent_lets_only_high_priority_through(
    api, gateway, primary, secondary
):
    await _budget("1.00")
    await _spent_today("0.90")
    primary.stop()
    assert (await ask(api, "Write a limerick.")).json()["tier"] == "degraded"
    assert secondary.calls == 0
    assert (await ask(api, "Write a limerick.", priority="high")).json()[
        "provider"
    ] == "openai-cloud"


async def test_a_cloud_budget_never_blocks_the_local_provider(api, gateway, primary):
    await _budget("1.00")
    await _spent_today("5.00")
    assert (await ask(api)).json()["provider"] == "ollama-local"


async def test_steady_state_requests_run_no_sql(api, gateway, monkeypatch):
    from django.db.backends.utils import CursorWrapper

    await ask(api)  # builds the snapshot
    await gateway.ledger.flush()
    gateway.ledger.FLUSH_EVERY_S = 3600  # keep the ledger's own writes out of the count
    # And the snapshot's poll of the change record (in the background, never on a request's
    # path): its next sleep is long, once the one under way has ended.
    gateway.snapshots.POLL_S = 3600
    await asyncio.sleep(0.6)
    queries: list[str] = []
    original = CursorWrapper.execute

    def counting(self, sql, params=None):
        queries.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", counting)
    for _ in range(20):
        assert (await ask(api)).status_code == 200
    assert queries == []
    monkeypatch.undo()
    assert len(await ledger_rows(gateway)) == 21


async def test_200_concurrent_requests_leave_200_ledger_rows(api, gateway, primary):
    responses = await asyncio.gather(*(ask(api, f"Question {i}") for i in range(200)))
    assert all(r.status_code == 200 for r in responses)
    rows = await ledger_rows(gateway)
    assert len(rows) == 200
    assert {str(r.request_id) for r in rows} == {r.json()["request_id"] for r in responses}


async def test_an_admin_change_is_served_within_a_second_without_sql_on_the_way(
    api, gateway, primary, secondary
):
    from providers.selectors import policy_get
    from providers.services.audit import config_change_record, instance_snapshot

    assert (await ask(api)).json()["provider"] == "ollama-local"

    def operator_flips_the_switch() -> None:
        policy = policy_get()
        before = instance_snapshot(policy)
        policy.kill_switch, policy.kill_switch_reason = "static_only", "drill"
        policy.save()
        config_change_record(
            target=policy, action="kill_switch", before=before, after=instance_snapshot(policy)
        )

    await sync_to_async(operator_flips_the_switch)()
    started = time.monotonic()
    while (await ask(api)).json()["tier"] not in ("static", "degraded"):
        assert time.monotonic() - started < 1.0
        await asyncio.sleep(0.02)


async def test_after_a_quiet_second_the_first_request_already_sees_a_change(api, gateway, primary):
    assert (await ask(api)).json()["provider"] == "ollama-local"  # the poller is running
    await update_policy_elsewhere(
        gateway.store, kill_switch="static_only", kill_switch_reason="drill"
    )
    await asyncio.sleep(1.0)  # no request meanwhile: the process rebuilt on its own
    assert (await ask(api)).json()["tier"] in ("static", "degraded")


async def update_policy_elsewhere(store, **values) -> None:
    """A change committed by another process: the row and the version (in `store`, the shared
    state), nothing in this one's snapshot holder."""
    from providers.selectors import policy_get

    def change() -> None:
        policy = policy_get()
        for key, value in values.items():
            setattr(policy, key, value)
        policy.save()

    await sync_to_async(change)()
    await sync_to_async(store.bump_config_version)()


async def test_shutdown_writes_what_the_ledger_holds(api, gateway):
    gateway.ledger.FLUSH_EVERY_S = 3600
    for _ in range(3):
        await ask(api)
    await gateway.aclose()
    assert await sync_to_async(CallRecord.objects.count)() == 3


async def test_with_redis_unreachable_routing_goes_on_with_local_state(
    api, gateway, primary, closed_port, caplog
):
    from gateway.state.redis_store import RedisStore
    from gateway.state.resilient_store import ResilientStore

    gateway.store = ResilientStore(RedisStore(f"redis://127.0.0.1:{closed_port}/0"))
    gateway.snapshots.store = gateway.store
    gateway.snapshots.mark_stale()
    response = await ask(api)
    assert response.status_code == 200 and response.json()["provider"] == "ollama-local"
    primary.set_fault(mode="error")
    for _ in range(3):
        assert (await ask(api)).status_code == 200
    calls = primary.calls
    assert (await ask(api)).json()["provider"] == "openai-cloud"
    assert primary.calls == calls  # the local breaker opened
    health = gateway.store.health()
    assert health["ok"] is False and health["routing_on"] == "local state"
    assert "Redis unreachable" in caplog.text


@pytest.mark.services
async def test_a_change_made_by_another_process_is_served_within_a_second(api, gateway, primary):
    from django.conf import settings

    from gateway.state.redis_store import RedisStore
    from providers.selectors import policy_get

    assert (await ask(api)).json()["provider"] == "ollama-local"

    def change_elsewhere() -> None:  # another process's admin: a new row and a version bump
        policy = policy_get()
        policy.kill_switch, policy.kill_switch_reason = "static_only", "drill"
        policy.save()
        RedisStore(settings.REDIS_URL).bump_config_version()

    await sync_to_async(change_elsewhere)()
    started = time.monotonic()
    while (await ask(api)).json()["tier"] not in ("static", "degraded"):
        assert time.monotonic() - started < 1.0
        await asyncio.sleep(0.05)


async def test_an_unforeseen_adapter_error_is_a_provider_failure_not_a_500(
    api, gateway, primary, monkeypatch, caplog
):
    from gateway.adapters.ollama import OllamaAdapter

    async def broken(self, request, *, timeout):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(OllamaAdapter, "complete", broken)
    response = await ask(api)
    assert response.status_code == 200 and response.json()["provider"] == "openai-cloud"
    [record] = await ledger_rows(gateway)
    assert record.attempts[0]["error_class"] == "malformed"
    assert "unforeseen" in caplog.text


async def test_a_failed_configuration_rebuild_keeps_the_last_one_serving(
    api, gateway, primary, monkeypatch
):
    assert (await ask(api)).json()["provider"] == "ollama-local"

    def database_down(*, version):
        raise OSError("database unreachable")

    monkeypatch.setattr(snapshots_module, "snapshot_build", database_down)
    gateway.snapshots.mark_stale()
    for _ in range(3):
        assert (await ask(api)).json()["provider"] == "ollama-local"


async def test_when_the_gateway_itself_cannot_route_the_client_gets_a_json_503(
    api, gateway, monkeypatch
):
    def database_down(*, version):
        raise OSError("database unreachable")

    monkeypatch.setattr(snapshots_module, "snapshot_build", database_down)
    response = await ask(api)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    monkeypatch.undo()
    [record] = await ledger_rows(gateway)
    assert (record.status, record.reason) == (503, "gateway_error")


@pytest.mark.services
async def test_budget_counters_lost_with_redis_come_back_from_the_ledger(
    api, gateway, primary, secondary, monkeypatch
):
    import redis as redis_client
    from django.conf import settings

    monkeypatch.setattr(gateway.snapshots, "SEED_EVERY_S", 0.5)
    await _budget("1.00")
    await _spent_today("0.90")
    primary.stop()
    # `cache: false`: an answer the secondary gave while the counters were gone would
    # otherwise come back from the answer cache once they are.
    assert (await ask(api, "Write a limerick.", cache=False)).json()["tier"] == "degraded"
    redis_client.Redis.from_url(settings.REDIS_URL).flushdb()  # Redis restarted empty
    started = time.monotonic()
    while time.monotonic() - started < 3:
        await asyncio.sleep(0.2)
        if (await ask(api, "Write a limerick.", cache=False)).json()["tier"] == "degraded":
            break
    assert (await ask(api, "Write a limerick.", cache=False)).json()["tier"] == "degraded"


async def test_a_self_hosted_providers_spend_never_counts_against_a_cloud_budget(
    api, gateway, providers_configured
):
    import time as clock

    from billing.selectors import budget_spend

    await _budget("1.00")
    await sync_to_async(CallRecord.objects.create)(
        final_provider="ollama-local", tier="primary", outcome="ok", status=200, cost=Decimal("3")
    )
    await _spent_today("0.25")
    budget = await sync_to_async(Budget.objects.get)()
    since = datetime.fromtimestamp(clock.time(), UTC).replace(hour=0, minute=0, second=0)
    spent = await sync_to_async(budget_spend)(budget_id=budget.pk, since=since)
    assert spent == Decimal("0.25")


async def test_a_provider_whose_key_variable_is_unset_is_skipped_without_a_call(
    api, gateway, primary, secondary, monkeypatch
):
    from providers.models import Provider

    monkeypatch.delenv("FAILOVER_SECRET_TEST_ROUTING_CLOUD_KEY", raising=False)
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        api_key_env="FAILOVER_SECRET_TEST_ROUTING_CLOUD_KEY"
    )
    await gateway.snapshots.refresh()
    primary.stop()

    body = (await ask(api, "Write a limerick.")).json()

    assert body["tier"] == "degraded" and secondary.calls == 0
    [record] = await ledger_rows(gateway)
    assert record.attempts[1] == {
        "provider": "openai-cloud",
        "outcome": "skipped",
        "error_class": "api_key_missing",
    }


@pytest.mark.services
async def test_a_plain_request_that_succeeds_first_time_makes_one_redis_round_trip(
    api, gateway, primary, monkeypatch
):
    assert await round_trips_of_steady_requests(api, monkeypatch) == [1] * 5


@pytest.mark.services
async def test_with_the_primary_down_its_open_breaker_costs_a_request_no_round_trip(
    api, gateway, primary, secondary, monkeypatch
):
    primary.set_fault(mode="error", status=503)
    for _ in range(3):  # three failures open it
        await ask(api, cache=False)
    state, _ = await gateway.store.read("ollama-local")
    assert state.state == State.OPEN
    # Passing the open breaker by rides on what was last heard of it: the secondary's record.
    counts = await round_trips_of_steady_requests(api, monkeypatch, tier="secondary")
    assert counts == [1] * 5
