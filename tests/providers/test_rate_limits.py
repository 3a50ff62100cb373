"""Requests and tokens per minute: the sliding window's arithmetic, the stores' atomic check,
and the limits as a routed request meets them (one round trip while far from a limit)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from edge.api.access import address_subject
from gateway.engine.rate import Limits, judge, rate_keys, retry_after
from gateway.routing.breaker_watch import MIN_SAMPLES
from gateway.state.memory_store import MemoryStore
from runtime.gateway import settings_for_clients
from tests.factories import make_client_app
from tests.providers.conftest import round_trips_of_steady_requests
from tests.providers.test_state_stores import store  # noqa: F401 - the two stores' fixture

T0 = 1_700_000_020.0  # 40 s into a minute
HELLO = [{"role": "user", "content": "Hi"}]


class TestTheWindow:
    pytestmark = pytest.mark.backend_free

    def test_the_previous_minute_weighs_by_how_much_of_it_is_still_in_the_window(self):
        keys = rate_keys("app:shop", T0)
        assert keys.weight == pytest.approx(1 - 40 / 60)
        assert keys.requests_now.endswith(f":r:{int(T0 // 60)}")
        assert keys.requests_prev.endswith(f":r:{int(T0 // 60) - 1}")

    def test_a_request_fits_while_the_estimate_stays_within_the_limit(self):
        keys = rate_keys("app:shop", T0)
        counts = {keys.requests_prev: 6.0, keys.requests_now: 7.0}  # 6 * 1/3 + 7 = 9
        assert judge(Limits(requests_per_minute=10), counts, keys).admitted
        assert not judge(Limits(requests_per_minute=9), counts, keys).admitted

    def test_a_token_limit_refuses_once_the_window_holds_that_many(self):
        keys = rate_keys("app:shop", T0)
        limits = Limits(tokens_per_minute=1000)
        assert judge(limits, {keys.tokens_now: 999.0}, keys).admitted
        verdict = judge(limits, {keys.tokens_now: 1000.0}, keys)
        assert (verdict.admitted, verdict.kind) == (False, "tokens")

    def test_retry_after_waits_for_the_previous_minute_to_drain_enough(self):
        # 40 s in: previous 30, current 0, room 9 -> 30 * (1 - (40 + t) / 60) <= 9 -> t >= 2
        assert retry_after(30, 0, 1 - 40 / 60, 9) == 2

    def test_retry_after_a_full_current_minute_is_past_the_minutes_end(self):
        # 40 s in, current 10 with room 9: 20 s to the minute's end, then 10 * (1 - t/60) <= 9
        assert retry_after(0, 10, 1 - 40 / 60, 9) == 26

    def test_retry_after_is_at_least_a_second_and_at_most_two_minutes(self):
        assert retry_after(0, 0, 1.0, 0) == 1
        assert retry_after(0, 10**9, 1.0, 1) == 120


async def test_rate_take_counts_exactly_up_to_the_limit_under_concurrency(store):  # noqa: F811
    keys = rate_keys("app:shop", T0)
    limits = Limits(requests_per_minute=10)
    taken = await asyncio.gather(*(store.rate_take(keys, limits, ttl_s=180) for _ in range(50)))
    assert sum(counted for counted, _ in taken) == 10
    counted, counts = await store.rate_take(keys, limits, ttl_s=180)
    assert not counted and counts[keys.requests_now] == 10


async def test_rate_take_without_a_check_always_counts(store):  # noqa: F811
    keys = rate_keys("app:shop", T0)
    for _ in range(3):
        counted, counts = await store.rate_take(keys, Limits(1), ttl_s=180, check=False)
        assert counted
    assert counts[keys.requests_now] == 3


async def test_a_window_counter_lapses_after_its_ttl_in_memory_as_in_redis():
    now = [0.0]
    memory = MemoryStore(clock=lambda: now[0])
    keys = rate_keys("app:shop", T0)
    await memory.rate_take(keys, Limits(), ttl_s=180, check=False)
    now[0] = 179.0
    assert (await memory.read("x", [keys.requests_now]))[1][keys.requests_now] == 1
    now[0] = 181.0
    assert (await memory.read("x", [keys.requests_now]))[1][keys.requests_now] == 0
    for _ in range(1100):  # enough writes to sweep: lapsed keys don't pile up
        await memory.rate_take(rate_keys(f"ip:{now[0]}", T0), Limits(), ttl_s=1, check=False)
        now[0] += 2
    assert len(memory._spend) < 1100


@pytest.mark.django_db(transaction=True)
async def test_a_limited_app_is_answered_up_to_its_limit_then_refused(
    api, gateway, primary, secondary
):
    await sync_to_async(make_client_app)(
        key="fgw_limited-app-key-000000000000000000000000000", requests_per_minute=5
    )
    await gateway.snapshots.refresh()
    headers = {"Authorization": "Bearer fgw_limited-app-key-000000000000000000000000000"}
    statuses = [
        (await api.post("/api/v1/complete", json={"prompt": "Hi"}, headers=headers)).status_code
        for _ in range(8)
    ]
    assert statuses == [200] * 5 + [429] * 3
    assert primary.calls == 5


@pytest.mark.django_db(transaction=True)
async def test_the_limit_is_checked_before_the_body_is_read(api, gateway, primary, secondary):
    # At its limit, a body that would be refused (or cost its parsing) is refused with the 429.
    key = "fgw_before-body-key-000000000000000000000000000"
    await sync_to_async(make_client_app)(key=key, requests_per_minute=1)
    await gateway.snapshots.refresh()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    assert (
        await api.post("/v1/chat/completions", content=b"{", headers=headers)
    ).status_code == 400
    refused = await api.post("/v1/chat/completions", content=b"{" * 100_000, headers=headers)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert primary.calls == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/models", None),
        ("POST", "/v1/messages/count_tokens", {"model": "auto", "messages": HELLO}),
    ],
)
async def test_the_doors_that_ask_no_provider_count_too(api, gateway, method, path, body):
    key = "fgw_no-provider-key-000000000000000000000000000"
    await sync_to_async(make_client_app)(key=key, requests_per_minute=2)
    await gateway.snapshots.refresh()
    headers = {"Authorization": f"Bearer {key}"}
    statuses = [
        (await api.request(method, path, json=body, headers=headers)).status_code for _ in range(3)
    ]
    assert statuses == [200, 200, 429]


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
async def test_a_request_of_a_limited_app_far_from_its_limit_still_makes_one_round_trip(
    api, gateway, primary, monkeypatch
):

    key = "fgw_busy-app-key-0000000000000000000000000000000"
    app = await sync_to_async(make_client_app)(
        key=key, requests_per_minute=10_000, tokens_per_minute=10_000_000
    )
    await gateway.snapshots.refresh()
    api.headers["Authorization"] = f"Bearer {key}"
    assert await round_trips_of_steady_requests(api, monkeypatch) == [1] * 5
    # Every request was counted, though none spent a round trip of its own on it: each took the
    # slot the record before it counted ahead, and the last record counted one for the next.
    keys = rate_keys(f"app:{app.name}", gateway.clock.wall())
    _, counts = await gateway.store.read("ollama-local", [keys.requests_prev, keys.requests_now])
    assert counts[keys.requests_prev] + counts[keys.requests_now] == MIN_SAMPLES + 5 + 1


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("address", "subject"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("unknown", "unknown"),
    ],
)
def test_an_anonymous_callers_window_is_its_ipv4_address_or_its_ipv6_64(address, subject):
    assert address_subject(address) == subject


def _ports(state):
    from gateway.adapters.pool import AdapterPool
    from gateway.engine.clock import Clock
    from gateway.routing.ports import Ports
    from gateway.routing.readings import Readings

    return Ports(
        store=state,
        clock=Clock(),
        adapters=AdapterPool(settings_for_clients()),
        readings=Readings(max_age_s=0.5),
    )


async def test_a_burst_is_admitted_exactly_up_to_the_limit_with_slots_held(store):  # noqa: F811
    # A slot counted ahead is a request in the window already: a burst that takes the slots and
    # then checks in the store is admitted exactly up to the limit, never past it.
    from gateway.routing.rate_limits import RateTicket, rate_admit
    from gateway.state.contract import SlotTake

    ports = _ports(store)
    limits = Limits(requests_per_minute=20)
    keys = rate_keys("app:shop", ports.clock.wall())
    for _ in range(5):  # five slots, as five records would have counted them
        counted, _ = await store.rate_take(keys, Limits(), ttl_s=180, check=False)
        ports.readings.slots.taken("app:shop", SlotTake(keys, Limits(100)), ports.clock.wall())
    admitted = await asyncio.gather(*(rate_admit(ports, "app:shop", limits) for _ in range(45)))
    assert sum(isinstance(ticket, RateTicket) for ticket in admitted) == 20
    _, counts = await store.rate_take(keys, limits, ttl_s=180)
    assert counts[keys.requests_now] == 20


async def test_a_record_counts_a_slot_ahead_only_while_the_window_is_under_half_the_limit(
    store,  # noqa: F811
):
    from gateway.routing.rate_slots import SHARE

    ports = _ports(store)
    slots = ports.readings.slots
    limits = Limits(requests_per_minute=200)
    keys = rate_keys("app:shop", ports.clock.wall())
    take = slots.offer("app:shop", keys, limits)
    assert take is not None and take.caps == Limits(int(200 * SHARE), 0)
    for _ in range(int(200 * SHARE) - 1):
        await store.rate_take(keys, Limits(), ttl_s=180, check=False)
    recorded = await store.record(_record_call(take))
    assert recorded.slot_taken  # 99 counted: the 100th fits half of 200
    recorded = await store.record(_record_call(take))
    assert not recorded.slot_taken
    _, counts = await store.rate_take(keys, Limits(), ttl_s=180, check=False, amount=0)
    assert counts[keys.requests_now] == 100


def _record_call(slot):
    from gateway.state.contract import RecordCall, Sample, Windows

    return RecordCall(
        "ollama-local",
        Sample(ok=True, failure=False, slow=False, over_p95=False, latency_ms=5.0),
        now=T0,
        windows=Windows(failure_window_s=60, p95_window_s=300, bucket_s=10),
        want_stats=False,
        slot=slot,
    )


@pytest.mark.backend_free
def test_no_slot_is_offered_for_a_small_limit_nor_past_a_full_pool_nor_in_process():
    from gateway.routing.rate_slots import POOL_MAX, SLOTS_FROM, RateSlots
    from gateway.state.contract import SlotTake

    keys = rate_keys("app:shop", T0)
    slots = RateSlots(enabled=True)
    assert slots.offer("app:shop", keys, Limits(SLOTS_FROM - 1)) is None
    assert slots.offer("app:shop", keys, Limits(tokens_per_minute=10_000)) is not None
    for _ in range(POOL_MAX):
        slots.taken("app:shop", SlotTake(keys, Limits(SLOTS_FROM)), T0)
    assert slots.offer("app:shop", keys, Limits(SLOTS_FROM)) is None
    assert RateSlots(enabled=False).offer("app:shop", keys, Limits(SLOTS_FROM)) is None


@pytest.mark.backend_free
def test_a_slot_not_taken_in_time_is_given_back_to_its_minute_by_the_next_record():
    from gateway.routing.rate_slots import TRUSTED_S, RateSlots
    from gateway.state.contract import SlotTake

    slots = RateSlots(enabled=True)
    keys = rate_keys("app:shop", T0)
    slots.taken("app:shop", SlotTake(keys, Limits(100)), T0)
    slots.taken("app:shop", SlotTake(keys, Limits(100)), T0)
    assert slots.claim("app:shop", T0 + 1)
    assert slots.take_stale(T0 + 1) == ()
    later = T0 + TRUSTED_S + 0.1
    assert not slots.claim("app:shop", later)
    (back,) = slots.take_stale(later)
    assert (back.key, back.amount) == (keys.requests_now, -1.0)
    assert slots.take_stale(later) == ()  # once
    # A slot of a minute the window no longer reads is dropped, not given back.
    slots.taken("app:shop", SlotTake(keys, Limits(100)), T0)
    slots.clear()
    assert slots.take_stale(T0 + 120) == ()


async def test_a_stopping_process_gives_its_slots_back(store):  # noqa: F811
    from gateway.state.contract import SlotTake

    ports = _ports(store)
    now = ports.clock.wall()
    keys = rate_keys("app:shop", now)
    for _ in range(3):
        await store.rate_take(keys, Limits(), ttl_s=180, check=False)
        ports.readings.slots.taken("app:shop", SlotTake(keys, Limits(100)), now)
    await ports.readings.slots.give_back_all(store, now)
    _, counts = await store.rate_take(keys, Limits(), ttl_s=180, check=False, amount=0)
    assert counts[keys.requests_now] == 0
