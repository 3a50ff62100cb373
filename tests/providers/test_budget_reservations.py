# ruff: noqa: F811 - `store` is the two stores' fixture, imported by name
"""Reserve, then settle: a paid call holds its worst case against every budget before it is
made, so calls admitted at the same moment can't together pass a cap; its record settles what
it used. The stores' atomic rule, the calendar periods, and the router's use of both."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from billing.models import Budget, CallRecord
from gateway.adapters.messages import CompletionRequest
from gateway.engine.budgets import Hold, budget_period, hold_refusal, prompt_tokens_reserved
from gateway.engine.reasons import SkipReason
from gateway.state import redis_scripts
from gateway.state.contract import HoldRelease, RecordCall, Sample, StateStore, Windows, spend_key
from tests.providers.conftest import (
    ask,
    ledger_rows,
    round_trips_of_steady_requests,
    update_policy,
)
from tests.providers.test_state_stores import store  # noqa: F401 - the two stores' fixture

T0 = 1_700_000_000.0
WINDOWS = Windows(1, 60, 120)
OK = Sample(ok=True, failure=False, slow=False, over_p95=False, latency_ms=100)


def hold(amount: float = 0.01, *, key: str = "spend:1:2026-12-01", limit: float = 0.10, level=None):
    return Hold(key, amount, limit, limit if level is None else level, 86_400)


def ts(text: str, zone: str = "UTC") -> float:
    from zoneinfo import ZoneInfo

    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


class TestThePeriods:
    pytestmark = pytest.mark.backend_free

    def test_a_day_begins_at_midnight_in_the_policys_time_zone(self):
        zone = "Europe/Amsterdam"
        before, after = ts("2026-12-01T23:59:59", zone), ts("2026-12-02T00:00:00", zone)
        assert budget_period("day", before, zone).label == "2026-12-01"
        assert budget_period("day", after, zone).label == "2026-12-02"
        # In UTC both moments are still the 1st (Amsterdam is an hour ahead in winter).
        assert budget_period("day", after, "UTC").label == "2026-12-01"
        day = budget_period("day", after, zone)
        assert (day.start, day.end) == (after, after + 86_400)

    def test_a_month_ends_at_the_last_days_midnight_there(self):
        zone = "America/New_York"
        last = ts("2026-02-28T23:59:59", zone)
        assert budget_period("month", last, zone).label == "2026-02"
        assert budget_period("month", last + 1, zone).label == "2026-03"
        assert budget_period("month", ts("2026-12-31T23:59:59", zone), zone).label == "2026-12"
        assert budget_period("month", ts("2027-01-01T00:00:00", zone), zone).label == "2027-01"

    def test_a_day_with_a_clock_change_is_23_hours_long(self):
        zone = "Europe/Amsterdam"
        day = budget_period("day", ts("2026-03-29T12:00:00", zone), zone)
        assert day.end - day.start == 23 * 3600

    def test_the_counter_key_follows_the_period_and_outlives_it_by_a_day(self):
        zone = "Europe/Amsterdam"
        at = ts("2026-12-01T23:00:00", zone)
        key, ttl = spend_key(7, "day", at, zone)
        assert key == "spend:7:2026-12-01"
        assert ttl == 3600 + 86_400
        assert spend_key(7, "day", at + 3600, zone)[0] == "spend:7:2026-12-02"
        assert spend_key(7, "month", at, zone)[0] == "spend:7:2026-12"

    def test_an_unknown_zone_counts_in_utc_rather_than_failing_a_request(self):
        assert budget_period("day", ts("2026-12-01T12:00:00"), "Nowhere/Else").label == (
            "2026-12-01"
        )


class TestTheRule:
    pytestmark = pytest.mark.backend_free

    def test_a_hold_fits_while_spend_and_holds_stay_within_the_hard_stop(self):
        assert hold_refusal(0.05, 0.04, hold(0.01)) == ""
        assert hold_refusal(0.05, 0.05, hold(0.01)) == "budget_exhausted"

    def test_past_the_high_priority_level_a_normal_call_is_refused(self):
        assert hold_refusal(0.085, 0.0, hold(0.01, level=0.085)) == "budget_high_priority_only"
        assert hold_refusal(0.085, 0.0, hold(0.01, level=float("inf"))) == ""

    def test_ten_cents_hold_exactly_ten_one_cent_calls_despite_rounding(self):
        held = 0.0
        for _ in range(10):
            assert hold_refusal(0.0, held, hold(0.01)) == ""
            held += 0.01
        assert hold_refusal(0.0, held, hold(0.01)) == "budget_exhausted"

    def test_a_prompt_is_estimated_from_above_whatever_its_script(self):
        # A token is at least one byte: digits (about two bytes a token), CJK (three bytes a
        # character, up to two tokens a character) and emoji all stay within it.
        assert prompt_tokens_reserved("1 2 3 4 5 " * 10, 1) >= 100
        assert prompt_tokens_reserved("日本語" * 10, 1) >= 2 * 30
        assert prompt_tokens_reserved("🙂" * 10, 1) >= 3 * 10


class TestThePool:
    pytestmark = pytest.mark.backend_free

    def test_a_call_claims_a_standing_hold_as_large_as_its_own_once(self):
        from gateway.routing.standing import StandingHolds

        pool = StandingHolds(enabled=True)
        take = pool.offer("cloud", [hold(0.02)], life_s=60)
        assert take is not None and take.holds[0].limit == pytest.approx(0.05)  # half the stop
        pool.taken("cloud", take, now=T0)
        assert pool.claim("cloud", [hold(0.03)], T0) is None  # too small for this call
        assert pool.claim("cloud", [hold(0.01)], T0) == take.holder
        assert pool.claim("cloud", [hold(0.01)], T0) is None  # claimed once

    def test_a_standing_hold_is_trusted_for_half_its_life(self):
        from gateway.routing.standing import StandingHolds

        pool = StandingHolds(enabled=True)
        take = pool.offer("cloud", [hold(0.02)], life_s=60)
        assert take is not None
        pool.taken("cloud", take, now=T0)
        assert pool.claim("cloud", [hold(0.02)], T0 + 30) is None

    def test_an_in_process_store_keeps_no_pool(self):
        from gateway.routing.standing import StandingHolds

        assert StandingHolds(enabled=False).offer("cloud", [hold()], life_s=60) is None


class TestTheStores:
    async def test_concurrent_reservations_take_exactly_what_fits(self, store: StateStore):
        results = await asyncio.gather(
            *(store.reserve(f"r{i}", [hold()], now=time.time(), life_s=60) for i in range(50))
        )
        assert sum(not r.refusal for r in results) == 10
        assert {r.refusal for r in results if r.refusal} == {"budget_exhausted"}
        count, total = (await store.holds_read([hold().key], now=time.time()))[hold().key]
        assert count == 10
        assert total == pytest.approx(0.10)

    async def test_the_record_settles_the_spend_and_drops_the_hold_in_one_step(
        self, store: StateStore
    ):
        from gateway.state.contract import SpendIncrement

        key = hold().key
        assert not (await store.reserve("r1", [hold(0.04)], now=time.time(), life_s=60)).refusal
        recorded = await store.record(
            RecordCall(
                "cloud",
                OK,
                now=time.time(),
                windows=WINDOWS,
                want_stats=False,
                spend=(SpendIncrement(key, 0.015, 86_400),),
                release=HoldRelease("r1", (key,)),
            )
        )
        assert recorded.spent[key] == pytest.approx(0.015)
        assert (await store.holds_read([key], now=time.time()))[key] == (0, 0.0)
        # What the call didn't use is free again: 0.015 spent leaves room for 0.085.
        assert not (await store.reserve("r2", [hold(0.085)], now=time.time(), life_s=60)).refusal

    async def test_every_budget_or_none(self, store: StateStore):
        day = hold(0.05, key="spend:1:2026-12-01")
        month = hold(0.05, key="spend:2:2026-12", limit=0.04)
        reserved = await store.reserve("r1", [day, month], now=time.time(), life_s=60)
        assert reserved.refusal == "budget_exhausted"
        read = await store.holds_read([day.key, month.key], now=time.time())
        assert read == {day.key: (0, 0.0), month.key: (0, 0.0)}

    async def test_a_hold_whose_process_died_lapses_at_its_expiry(self, store: StateStore):
        # On the store's own clock (Redis's), so the lapse is waited for, not pretended.
        assert not (await store.reserve("dead", [hold(0.10)], now=time.time(), life_s=0.4)).refusal
        refused = await store.reserve("next", [hold(0.01)], now=time.time(), life_s=60)
        assert refused.refusal == "budget_exhausted"
        await asyncio.sleep(0.5)
        taken = await store.reserve("next", [hold(0.01)], now=time.time(), life_s=60)
        assert not taken.refusal
        assert (await store.holds_read([hold().key], now=time.time()))[hold().key][0] == 1

    async def test_a_record_takes_a_standing_hold_for_the_next_call_while_it_fits(
        self, store: StateStore
    ):
        from gateway.state.contract import SpendIncrement, StandingTake

        key = hold().key

        async def settle(holder: str):
            return await store.record(
                RecordCall(
                    "cloud",
                    OK,
                    now=time.time(),
                    windows=WINDOWS,
                    want_stats=False,
                    spend=(SpendIncrement(key, 0.02, 86_400),),
                    standing=StandingTake(holder, (hold(0.02, limit=0.05),), 0.4),
                )
            )

        assert (await settle("standing:a")).standing_taken  # 0.02 spent + 0.02 held ≤ 0.05
        assert not (await settle("standing:b")).standing_taken  # 0.04 + 0.02 + 0.02 > 0.05
        assert (await store.holds_read([key], now=time.time()))[key] == (1, pytest.approx(0.02))
        await asyncio.sleep(0.5)
        assert (await store.holds_read([key], now=time.time()))[key] == (0, 0.0)  # it lapses

    async def test_a_released_hold_is_gone(self, store: StateStore):
        await store.reserve("r1", [hold(0.10)], now=time.time(), life_s=60)
        await store.release("r1", [hold().key])
        assert (await store.holds_read([hold().key], now=time.time()))[hold().key] == (0, 0.0)
        assert not (await store.reserve("r2", [hold(0.10)], now=time.time(), life_s=60)).refusal


# --- The router ------------------------------------------------------------------------------

PROMPT = "Say hello."
# Prices at which PROMPT with max_tokens=80 reserves exactly 0.01: (reserved prompt + 80) tokens
# at 100 per million tokens.
UNIT_PRICE = Decimal("100")


async def _cloud_only(gateway, *, cap: str, price: Decimal = UNIT_PRICE, **policy) -> Budget:
    from providers.models import Provider

    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(enabled=False)
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        price_input_per_1m=price, price_output_per_1m=price
    )
    budget = await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal(cap))
    await update_policy(gateway, **policy)
    return budget


def _prompt_reserved() -> int:
    return prompt_tokens_reserved(CompletionRequest(prompt=PROMPT).all_text(), 1)


def _max_tokens_for_one_cent() -> int:
    return 100 - _prompt_reserved()


async def _holds(gateway, budget: Budget) -> tuple[int, float]:
    """The budget's holds once the process gives back the room it keeps for its next calls
    (as it does when it stops): what is left was leaked."""
    await gateway.readings.standing.release_all(gateway.store)
    key = spend_key(budget.pk, "day", time.time())[0]
    return (await gateway.store.holds_read([key], now=time.time()))[key]


async def test_concurrent_requests_never_take_more_than_the_budget_holds(api, gateway, secondary):
    budget = await _cloud_only(gateway, cap="0.10")
    secondary.set_fault(mode="slow", delay_ms=300)
    # High priority: past 85 % a normal request would stop at the ninth (tested below).
    answers = await asyncio.gather(
        *(
            ask(api, PROMPT, max_tokens=_max_tokens_for_one_cent(), cache=False, priority="high")
            for _ in range(30)
        )
    )
    served = [a.json() for a in answers if a.json().get("provider") == "openai-cloud"]
    records = await ledger_rows(gateway)
    assert len(served) == 10, [r.attempts for r in records]
    assert secondary.calls == 10
    assert await _holds(gateway, budget) == (0, 0.0)
    records = await ledger_rows(gateway)
    assert sum(r.cost for r in records) <= Decimal("0.10")
    refused = [r for r in records if r.final_provider != "openai-cloud"]
    assert {r.attempts[-1]["error_class"] for r in refused} == {"budget_exhausted"}


async def test_past_85_percent_held_only_high_priority_is_admitted(api, gateway, secondary):
    await _cloud_only(gateway, cap="0.10")
    secondary.set_fault(mode="slow", delay_ms=300)
    asks = [ask(api, PROMPT, max_tokens=_max_tokens_for_one_cent(), cache=False) for _ in range(12)]
    normal = await asyncio.gather(*asks)
    assert sum(a.json()["tier"] != "degraded" for a in normal) == 9  # 0.09 held: past 0.085
    records = await ledger_rows(gateway)
    reasons = {r.attempts[-1].get("error_class") for r in records if not r.final_provider}
    assert reasons == {"budget_high_priority_only"}


async def test_a_failed_call_releases_its_hold_and_costs_nothing(api, gateway, secondary):
    budget = await _cloud_only(gateway, cap="0.10")
    secondary.set_fault(mode="error")
    for _ in range(3):
        assert (await ask(api, PROMPT, cache=False)).json()["tier"] != "secondary"
    assert await _holds(gateway, budget) == (0, 0.0)
    key = spend_key(budget.pk, "day", time.time())[0]
    _, spent = await gateway.store.read("", [key])
    assert spent[key] == 0.0


async def test_a_call_that_loses_a_hedged_race_releases_its_hold(api, gateway, primary, secondary):
    from providers.models import Provider

    budget = await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("1"))
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        price_input_per_1m=UNIT_PRICE, price_output_per_1m=UNIT_PRICE
    )
    await update_policy(gateway, strategy="hedged", hedge_after_ms=100)
    primary.set_fault(mode="slow", delay_ms=400)
    secondary.set_fault(mode="slow", delay_ms=2000)
    body = (await ask(api, PROMPT, cache=False)).json()
    assert body["provider"] == "ollama-local"
    [record] = await ledger_rows(gateway)
    assert [a["outcome"] for a in record.attempts] == ["ok", "cancelled"]
    assert await _holds(gateway, budget) == (0, 0.0)


async def test_the_ledger_names_each_attempts_model_and_cost(api, gateway, primary, secondary):
    primary.set_fault(mode="error")
    assert (await ask(api, PROMPT, cache=False)).json()["provider"] == "openai-cloud"
    [record] = await ledger_rows(gateway)
    first, second = record.attempts
    assert (first["model"], first["cost"]) == ("llama3.1:8b", "0")
    assert second["model"] == "gpt-4o-mini"
    assert Decimal(second["cost"]) == record.cost > 0
    assert record.model == "gpt-4o-mini"


async def test_a_token_budget_holds_tokens_not_money(api, gateway, primary, secondary):
    from providers.models import Provider

    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(enabled=False)
    budget = await sync_to_async(Budget.objects.create)(
        scope="all", period="day", unit="tokens", cap=Decimal("160")
    )
    await update_policy(gateway)
    secondary.set_fault(mode="slow", delay_ms=300)
    # Each request holds its prompt (from above) and its 50 answer tokens: 77; two fit in 160.
    assert _prompt_reserved() + 50 == 77
    answers = await asyncio.gather(
        *(ask(api, PROMPT, max_tokens=50, cache=False) for _ in range(4))
    )
    assert [a.json()["provider"] for a in answers].count("openai-cloud") == 2
    records = await ledger_rows(gateway)
    used = sum(r.tokens_in + r.tokens_out for r in records if r.final_provider)
    key = spend_key(budget.pk, "day", time.time())[0]
    _, spent = await gateway.store.read("", [key])
    assert spent[key] == used > 0  # settled at what was used, not at what was held
    assert await _holds(gateway, budget) == (0, 0.0)


async def test_counters_lost_are_rebuilt_from_the_ledger_in_tokens_too(
    api, gateway, providers_configured
):
    from billing.selectors import budget_spend

    budget = await sync_to_async(Budget.objects.create)(
        scope="all", period="day", unit="tokens", cap=Decimal("1000")
    )
    await sync_to_async(CallRecord.objects.create)(
        final_provider="openai-cloud",
        tier="secondary",
        outcome="ok",
        status=200,
        tokens_in=120,
        tokens_out=30,
    )
    since = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert await sync_to_async(budget_spend)(budget_id=budget.pk, since=since) == 150


async def test_the_watchdog_raises_50_85_and_100_percent_once_each(gateway, providers_configured):
    from alerts.models import AlertEvent
    from runtime.jobs import watchdog_job

    budget = await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("1"))
    await update_policy(gateway)
    key, ttl = spend_key(budget.pk, "day", time.time())
    for spent in (0.3, 0.5, 0.6, 0.86, 0.9, 1.0, 1.0):
        await gateway.store.seed_spend(key, spent, ttl)
        for _ in range(2):  # it runs every 30 s: a level already raised adds nothing
            await watchdog_job(gateway)
    events = await sync_to_async(list)(AlertEvent.objects.filter(kind="budget").order_by("id"))
    assert [e.data["level"] for e in events] == [50, 85, 100]
    assert [e.severity for e in events] == ["warning", "warning", "critical"]
    assert all(e.key.endswith(key.rsplit(":", 1)[-1]) for e in events)


@pytest.mark.services
async def test_a_free_call_beside_a_budget_still_makes_one_round_trip(api, gateway, monkeypatch):
    await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("5"))
    await update_policy(gateway)
    # The self-hosted primary: no budget holds it, so its record is its one round trip.
    assert await round_trips_of_steady_requests(api, monkeypatch) == [1] * 5


@pytest.mark.services
async def test_a_paid_call_far_from_its_cap_makes_one_round_trip(api, gateway, monkeypatch):
    from providers.models import Provider

    budget = await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("5"))
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(enabled=False)
    await update_policy(gateway)
    # Each record settles its call and takes the room for the next, which claims it here.
    assert await round_trips_of_steady_requests(api, monkeypatch) == [1] * 5
    assert await _holds(gateway, budget) == (0, 0.0)


@pytest.mark.services
async def test_past_half_its_cap_a_paid_call_reserves_its_own(api, gateway, monkeypatch):
    from providers.models import Provider

    # The suite's cloud prices: a request reserves its prompt and 4,096 answer tokens, about
    # 0.0025; a cap of 0.004 leaves no room under half of it for a standing hold.
    budget = await sync_to_async(Budget.objects.create)(
        scope="all", period="day", cap=Decimal("0.004")
    )
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(enabled=False)
    await update_policy(gateway)
    # The reservation before the call, the record (which settles it) after: exact, near a cap.
    assert await round_trips_of_steady_requests(api, monkeypatch) == [2] * 5
    assert await _holds(gateway, budget) == (0, 0.0)


async def test_housekeeping_rolls_up_and_prunes_once_across_processes(
    gateway, providers_configured
):
    from datetime import timedelta

    from billing.models import DailyUsage
    from runtime.jobs import housekeeping_job

    old = datetime.now(UTC) - timedelta(days=40)
    await sync_to_async(CallRecord.objects.create)(
        final_provider="openai-cloud", tier="secondary", outcome="ok", status=200, created_at=old
    )
    done = await housekeeping_job(gateway)
    assert done is not None
    assert await sync_to_async(CallRecord.objects.count)() == 0  # past the 30 days: pruned
    assert await sync_to_async(DailyUsage.objects.filter(day=old.date()).exists)()
    assert await housekeeping_job(gateway) is None  # another process's turn is taken


@pytest.mark.backend_free
def test_the_scripts_refusals_are_the_skip_reasons_the_python_rule_gives():
    # `budgets.hold_refusal` written again in Lua: the same words, or the ledger would hold two.
    said = set(re.findall(r"refusal = '([a-z_]+)'", redis_scripts.RESERVE))
    assert said == {SkipReason.BUDGET_EXHAUSTED, SkipReason.BUDGET_HIGH_PRIORITY_ONLY}
