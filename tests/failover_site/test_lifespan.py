# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""The serving process's gateway: built by the ASGI lifespan, handed to every request through
the lifespan state, and the committed configuration changes going to it; without it (a server
that runs no lifespan) every door says so instead of failing."""

from __future__ import annotations

import gc
import time

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from providers.models import KillSwitch
from providers.selectors import policy_get
from providers.services import policy as policy_services
from providers.signals import config_committed
from runtime.gateway import STATE_KEY, Gateway
from runtime.wiring import NOT_SERVING_UID
from tests.control.conftest import status_permission
from tests.factories import AUTH
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    _flush_test_redis,
    primary,
    providers_configured,
    secondary,
    serve_asgi,
)
from tests.serving import lifespan_run

pytestmark = pytest.mark.slow  # a server of its own, with its lifespan

HELLO = {"prompt": "Say hello."}


def _not_serving_receiver_connected() -> bool:
    return any(key[0] == NOT_SERVING_UID for key, *_ in config_committed.receivers)


@pytest.fixture
def lifespan_platform(providers_configured, monkeypatch):
    """The platform as deployed: uvicorn runs its lifespan (no periodic jobs), which builds
    the gateway."""
    from failover_site import asgi

    monkeypatch.setattr(asgi, "serving_process_jobs", lambda: ())
    _flush_test_redis()

    async def nothing() -> None:
        pass

    try:
        with serve_asgi(asgi.application, nothing, lifespan="on") as url:
            yield url
    finally:
        gc.unfreeze()  # the start-up froze this test process's objects
        _flush_test_redis()


def test_the_lifespan_builds_the_gateway_and_every_request_is_served_with_it(
    lifespan_platform, primary
):
    with httpx.Client(base_url=lifespan_platform, headers=AUTH, timeout=10) as http:
        ready = http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["state_store"]["ok"] is True
        answer = http.post("/api/v1/complete", json=HELLO)
        assert (answer.status_code, answer.json()["tier"]) == (200, "primary")
        assert primary.calls == 1

        # A change committed in this process goes to the serving gateway, which routes on it
        # within a second (its snapshot is rebuilt in the background).
        assert not _not_serving_receiver_connected()
        admin = get_user_model().objects.create_superuser("ops", "ops@example.com")
        policy_services.kill_switch_set(
            mode=KillSwitch.STATIC_ONLY, provider=None, reason="drill", actor=admin
        )
        started = time.monotonic()
        while http.post("/api/v1/complete", json=HELLO).json()["tier"] == "primary":
            assert time.monotonic() - started < 1.0, "the change was not routed on in time"
            time.sleep(0.02)


async def test_the_lifespan_puts_its_gateway_in_the_state_the_server_keeps(
    transactional_db, monkeypatch
):
    state: dict = {}
    assert _not_serving_receiver_connected()
    async with lifespan_run(monkeypatch, state=state) as sent:
        assert sent == [{"type": "lifespan.startup.complete"}]
        assert isinstance(state[STATE_KEY], Gateway)
        assert not _not_serving_receiver_connected()  # the changes go to that gateway
    # Stopped: a change made here moves the shared version itself again.
    assert _not_serving_receiver_connected()
    await sync_to_async(connections.close_all)()


async def test_a_server_that_keeps_no_lifespan_state_fails_the_start_up_saying_why(
    transactional_db, monkeypatch
):
    async with lifespan_run(monkeypatch, state=None) as sent:
        [failed] = sent
        assert failed["type"] == "lifespan.startup.failed"
        assert "keeps no lifespan state" in failed["message"]


# Without the lifespan --------------------------------------------------------------------------


@pytest.fixture
async def no_lifespan(providers_configured):
    """The application called as a server without the lifespan protocol calls it."""
    from failover_site.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=AUTH
    ) as client:
        yield client
    await sync_to_async(connections.close_all)()


async def test_without_it_the_api_answers_503_in_each_endpoints_shape(no_lifespan):
    own = await no_lifespan.post("/api/v1/complete", json={"prompt": "Say hello."})
    assert own.status_code == 503
    assert own.json()["error"]["code"] == "not_started"
    openai = await no_lifespan.post(
        "/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "Hi."}]},
    )
    assert openai.status_code == 503
    assert openai.json()["error"]["code"] == "not_started"
    assert openai.json()["error"]["type"]  # OpenAI's error shape


async def test_without_it_the_process_is_not_ready(no_lifespan):
    ready = await no_lifespan.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["state_store"] == {"ok": False, "error": "the gateway is not started"}


def test_without_it_the_control_room_says_so_in_place_of_the_status(db):
    status_permission()
    policy_get()
    client = Client()  # Django's WSGI handler: no lifespan, no state
    client.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com"))
    page = client.get("/admin/")
    assert page.status_code == 200
    assert b'id="not-started"' in page.content
    panel = client.get("/admin/control/status/")
    assert b'id="not-started"' in panel.content
