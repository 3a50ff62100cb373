"""A key made a moment ago is answered at once: a key the snapshot doesn't know is looked up in
the database (by its digest) before it is refused. Made-up keys cost the database little: a miss
is remembered for a few seconds, lookups are capped per second, and a key the snapshot knows
costs no lookup at all."""

from __future__ import annotations

import asyncio
import io
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gateway.engine.clients import Clients, key_digest
from gateway.engine.clock import Clock
from providers.selectors import clients_build
from providers.services.client_apps import client_app_create, client_app_revoke
from runtime import key_lookup
from runtime.gateway import Gateway
from tests.factories import TEST_CLIENT_KEY, make_client_app

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "Say hello."}]}
PRIMARY_TEXT = "Hello from the local model."


@dataclass
class Lookups:
    """The database lookups of keys, each with the queries it ran (counted in the ORM's thread,
    where the lookup runs)."""

    queries: list[int]

    @property
    def count(self) -> int:
        return len(self.queries)


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Lookups:
    counted = Lookups([])

    def counting(**kwargs: Any) -> Clients:
        with CaptureQueriesContext(connection) as queries:
            found = clients_build(**kwargs)
        counted.queries.append(len(queries))
        return found

    monkeypatch.setattr(key_lookup, "clients_build", counting)
    return counted


@dataclass
class MonoClock:
    """The lookup's monotonic time, moved by hand."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def mono(gateway: Gateway) -> MonoClock:
    clock = MonoClock()
    gateway.snapshots.keys.clock = Clock(mono=clock)
    return clock


async def chat(api: httpx.AsyncClient, key: str) -> httpx.Response:
    return await api.post(CHAT, json=BODY, headers={"Authorization": f"Bearer {key}"})


def made_up_key() -> str:
    return "fgw_" + secrets.token_urlsafe(32)


async def create_key(**values: Any) -> str:
    _, key = await sync_to_async(client_app_create)(actor=None, allowed_models="*", **values)
    return key


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


# A new key ------------------------------------------------------------------------------------


async def test_a_key_made_by_the_command_is_answered_through_the_sdk_at_once(
    live_url, gateway, primary, lookups
):
    before = await gateway.snapshots.refresh()
    out = io.StringIO()
    await sync_to_async(call_command)("clientapp", "create", "fresh", "--json", stdout=out)
    key = json.loads(out.getvalue())["key"]
    assert key_digest(key) not in before.clients.by_digest

    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=key, max_retries=0, timeout=30
    ) as client:
        completion = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Say hello."}]
        )

    assert completion.choices[0].message.content == PRIMARY_TEXT
    # Admitted by the lookup: the snapshot the request was checked against didn't know it.
    assert lookups.queries == [1]


async def test_a_key_found_in_the_database_brings_the_next_snapshot_at_once(
    api, gateway, primary, lookups
):
    await gateway.snapshots.refresh()
    key = made_up_key()
    # Made without a recorded change: only the lookup can tell the process the snapshot is behind.
    await sync_to_async(make_client_app)(key, name="quiet")

    def snapshot_knows_it() -> bool:
        snapshot = gateway.snapshots.latest()
        return snapshot is not None and key_digest(key) in snapshot.clients.by_digest

    assert not snapshot_knows_it()
    assert (await chat(api, key)).status_code == 200
    await until(snapshot_knows_it)
    assert (await chat(api, key)).status_code == 200
    assert lookups.count == 1


async def test_a_known_key_costs_no_lookup(api, gateway, primary, lookups):
    for _ in range(3):
        assert (await chat(api, TEST_CLIENT_KEY)).status_code == 200
    assert lookups.count == 0


# Made-up keys -----------------------------------------------------------------------------------


async def test_a_made_up_key_is_refused_and_looked_up_once_within_the_miss_window(
    api, gateway, primary, lookups, mono
):
    key = made_up_key()
    for _ in range(5):
        response = await chat(api, key)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert lookups.queries == [1]
    assert primary.calls == 0

    mono.now += key_lookup.KeyLookup.MISS_TTL_S + 0.1
    assert (await chat(api, key)).status_code == 401
    assert lookups.queries == [1, 1]


async def test_a_key_made_after_its_miss_is_answered_once_the_miss_is_forgotten(
    api, gateway, primary, lookups, mono
):
    key = made_up_key()
    assert (await chat(api, key)).status_code == 401
    await sync_to_async(make_client_app)(key, name="late")

    assert (await chat(api, key)).status_code == 401  # the miss is remembered
    mono.now += key_lookup.KeyLookup.MISS_TTL_S + 0.1
    assert (await chat(api, key)).status_code == 200
    assert lookups.count == 2


async def test_requests_with_the_same_unknown_key_at_once_share_one_lookup(
    api, gateway, primary, lookups
):
    await gateway.snapshots.refresh()
    key = made_up_key()
    await sync_to_async(make_client_app)(key, name="burst")  # no recorded change: no rebuild

    responses = await asyncio.gather(*(chat(api, key) for _ in range(8)))

    assert [r.status_code for r in responses] == [200] * 8
    assert lookups.count == 1


async def test_the_lookup_cap_holds_under_many_random_keys(api, gateway, primary, lookups, mono):
    gateway.snapshots.keys.LOOKUPS_PER_S = 5
    await gateway.snapshots.refresh()

    responses = await asyncio.gather(*(chat(api, made_up_key()) for _ in range(60)))

    assert {r.status_code for r in responses} == {401}
    assert {r.json()["error"]["code"] for r in responses} == {"invalid_api_key"}
    assert lookups.count == 5
    # The app the snapshot knows goes on meanwhile, and costs no lookup.
    assert (await chat(api, TEST_CLIENT_KEY)).status_code == 200
    assert lookups.count == 5

    mono.now += 1.0  # a second later, as many more
    await asyncio.gather(*(chat(api, made_up_key()) for _ in range(60)))
    assert lookups.count == 10
    assert set(lookups.queries) == {1}


async def test_beyond_the_cap_even_a_real_new_key_waits_for_the_snapshot(
    api, gateway, primary, lookups, mono
):
    gateway.snapshots.keys.LOOKUPS_PER_S = 2
    await gateway.snapshots.refresh()
    for _ in range(2):
        await chat(api, made_up_key())
    key = await create_key(name="unlucky")

    assert (await chat(api, key)).status_code == 401
    assert lookups.count == 2
    await gateway.snapshots.refresh()
    assert (await chat(api, key)).status_code == 200


# Revoked keys -----------------------------------------------------------------------------------


async def test_a_key_revoked_before_any_snapshot_knew_it_is_refused_as_revoked(
    api, gateway, primary, lookups
):
    await gateway.snapshots.refresh()
    app, key = await sync_to_async(client_app_create)(actor=None, name="short-lived")
    await sync_to_async(client_app_revoke)(app=app, actor=None)

    for _ in range(3):
        response = await chat(api, key)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "revoked_api_key"
    assert lookups.count == 1
    assert primary.calls == 0


async def test_a_key_revoked_after_the_snapshot_knew_it_stays_refused_without_a_lookup(
    api, gateway, primary, lookups
):
    app, key = await sync_to_async(client_app_create)(actor=None, name="leaked")
    await gateway.snapshots.refresh()
    assert (await chat(api, key)).status_code == 200
    await sync_to_async(client_app_revoke)(app=app, actor=None)
    await gateway.snapshots.refresh()

    response = await chat(api, key)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "revoked_api_key"
    assert lookups.count == 0


async def test_nothing_of_the_key_is_logged(api, gateway, primary, lookups, mono, caplog):
    gateway.snapshots.keys.LOOKUPS_PER_S = 1
    await gateway.snapshots.refresh()
    keys = [made_up_key() for _ in range(3)]
    for key in keys:
        await chat(api, key)
    logged = caplog.text
    assert "unknown client keys" in logged  # the cap was met, and said so
    for key in keys:
        assert key[:12] not in logged and key_digest(key)[:12] not in logged
