"""Stand-ins are the client app's choice: a widget takes the cached answer, the static answer and
the apology when no provider answers; an agent's backend takes none and gets a 503 in OpenAI's
shape with Retry-After counting down to the earliest breaker probe. Every stand-in says so in
X-Failover-Stand-In. Through the official SDK and langchain-openai, over a real socket."""

from __future__ import annotations

import json
from io import StringIO

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.urls import reverse
from langchain_openai import ChatOpenAI

from providers.models import ClientApp
from tests.factories import TEST_CLIENT_KEY, make_client_app
from tests.providers.conftest import ledger_rows, update_policy

pytestmark = pytest.mark.django_db(transaction=True)

AGENT_KEY = "fgw_an-agent-backends-own-key-000000000000000"
HELLO = [{"role": "user", "content": "Say hello."}]
HOURS = [{"role": "user", "content": "What are your opening hours?"}]


def sdk(live_url: str, key: str = TEST_CLIENT_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0, timeout=30)


async def agent_app(**takes: bool) -> ClientApp:
    values = {"accept_cached": False, "accept_static": False, "accept_degraded": False, **takes}
    return await sync_to_async(make_client_app)(key=AGENT_KEY, name="agent-backend", **values)


async def refused_503(client: openai.AsyncOpenAI, messages=HELLO, **extra) -> httpx.Response:
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="auto", messages=messages, **extra)
    assert caught.value.status_code == 503
    return caught.value.response


async def test_a_widget_takes_the_apology_and_the_header_says_it_stood_in(
    live_url, gateway, primary, secondary
):
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    assert raw.status_code == 200
    assert raw.headers["X-Failover-Tier"] == "degraded"
    assert raw.headers["X-Failover-Stand-In"] == "degraded"
    assert "Retry-After" not in raw.headers


async def test_a_providers_answer_is_never_marked_as_a_stand_in(live_url, primary, secondary):
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    assert raw.headers["X-Failover-Tier"] == "primary"
    assert "X-Failover-Stand-In" not in raw.headers


async def test_an_agent_app_gets_a_503_in_openais_shape_instead_of_the_apology(
    live_url, gateway, primary, secondary
):
    await agent_app()
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    async with sdk(live_url, AGENT_KEY) as client:
        response = await refused_503(client)
    body = response.json()
    assert body["error"]["code"] == "providers_unavailable"
    assert "stand-in" in body["error"]["message"]
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    # Both providers were called and failed: a retry may find one at once.
    assert response.headers["Retry-After"] == "1"
    assert response.headers["X-Failover-Tier"] == "none"
    assert "X-Failover-Stand-In" not in response.headers
    assert (primary.calls, secondary.calls) == (1, 1)
    [record] = await ledger_rows(gateway)
    assert (record.client, record.tier, record.status) == ("agent-backend", "none", 503)


async def test_retry_after_counts_down_to_the_earliest_breaker_probe(
    live_url, gateway, clock, primary, secondary
):
    await agent_app()
    await update_policy(gateway, consecutive_failures=1, cooldown_s=60, max_cooldown_s=600)
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    async with sdk(live_url, AGENT_KEY) as client:
        await refused_503(client)  # opens both breakers
        calls = (primary.calls, secondary.calls)
        response = await refused_503(client)
        assert response.headers["Retry-After"] == "60"
        clock.advance(45)
        response = await refused_503(client)
        assert response.headers["Retry-After"] == "15"
    # Both passed over: nobody waited on them but the trickle, a call to the provider whose
    # cooldown ends first (the primary), at most one a second, which failed and changed nothing.
    assert secondary.calls == calls[1]
    assert primary.calls - calls[0] in (1, 2)


async def test_an_app_that_takes_static_answers_only_gets_them_and_a_503_for_the_rest(
    live_url, primary, secondary
):
    await agent_app(accept_static=True)
    primary.stop()
    secondary.stop()
    async with sdk(live_url, AGENT_KEY) as client:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=HOURS)
        assert raw.headers["X-Failover-Stand-In"] == "static"
        assert raw.parse().model == "static"
        await refused_503(client, HELLO)


async def test_the_cached_answer_stands_in_only_for_an_app_that_takes_it(
    live_url, gateway, primary, secondary
):
    await agent_app(accept_static=True, accept_degraded=True)
    question = [{"role": "user", "content": "Tell me something only a model would."}]
    async with sdk(live_url) as widget, sdk(live_url, AGENT_KEY) as agent:
        first = await widget.chat.completions.create(model="auto", messages=question)
        primary.stop()
        secondary.stop()
        raw = await widget.chat.completions.with_raw_response.create(
            model="auto", messages=question
        )
        assert raw.headers["X-Failover-Stand-In"] == "cached"
        assert raw.parse().choices[0].message.content == first.choices[0].message.content
        raw = await agent.chat.completions.with_raw_response.create(model="auto", messages=question)
        assert raw.headers["X-Failover-Stand-In"] == "degraded"


async def test_a_stream_for_an_agent_app_is_a_clean_503_before_any_event(
    live_url, primary, secondary
):
    await agent_app()
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    async with httpx.AsyncClient(base_url=live_url, timeout=30) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "auto", "messages": HELLO, "stream": True},
            headers={"Authorization": f"Bearer {AGENT_KEY}"},
        )
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["Retry-After"] == "1"


async def test_the_frontends_endpoint_answers_an_agent_app_with_a_503_too(
    live_url, primary, secondary
):
    await agent_app()
    primary.stop()
    secondary.stop()
    async with httpx.AsyncClient(base_url=live_url, timeout=30) as client:
        response = await client.post(
            "/api/v1/complete",
            json={"prompt": "What are your opening hours?"},
            headers={"Authorization": f"Bearer {AGENT_KEY}"},
        )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "providers_unavailable"
    assert response.headers["Retry-After"] == "1"


async def test_langchain_raises_for_an_agent_app_instead_of_taking_the_apology(
    live_url, primary, secondary
):
    await agent_app()
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    chat = ChatOpenAI(
        model="auto", base_url=live_url + "/v1", api_key=AGENT_KEY, max_retries=0, timeout=30
    )
    with pytest.raises(openai.APIStatusError) as caught:
        await chat.ainvoke("Say hello.")
    assert caught.value.status_code == 503


def test_clientapp_create_sets_the_stand_ins(db):
    out = StringIO()
    call_command("clientapp", "create", "agent", "--stand-ins", "none", "--json", stdout=out)
    assert json.loads(out.getvalue())["stand_ins"] == []
    call_command("clientapp", "create", "kiosk", "--stand-ins", "static,cached", stdout=StringIO())
    call_command("clientapp", "create", "widget", stdout=StringIO())
    taken = {app.name: sorted(app.stand_ins) for app in ClientApp.objects.all()}
    assert taken == {
        "agent": [],
        "kiosk": ["cached", "static"],
        "widget": ["cached", "degraded", "static"],
    }


def test_clientapp_create_refuses_a_stand_in_it_doesnt_know(db):
    with pytest.raises(CommandError, match="apology: write all, none, or some of cached"):
        call_command("clientapp", "create", "agent", "--stand-ins", "apology")
    assert not ClientApp.objects.exists()


def test_the_admin_shows_and_saves_the_stand_ins(admin_client):
    app = make_client_app(name="agent")
    page = admin_client.get(reverse("admin:providers_clientapp_change", args=[app.pk]))
    assert page.status_code == 200
    for field in ("accept_cached", "accept_static", "accept_degraded"):
        assert f'name="{field}"' in page.content.decode()
