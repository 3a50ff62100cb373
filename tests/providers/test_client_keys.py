"""Client keys at the API's edge: who is calling comes from the key, what the key's app may ask
for, its rate limits, the anonymous widget mode and who may read the status. A refused request
calls no provider, charges no budget and leaves no ledger row."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import Client

from billing.models import Budget
from gateway.state.contract import spend_key
from providers.models import ClientApp
from providers.services.audit import row_save
from providers.services.client_apps import client_app_revoke
from runtime.gateway import Gateway
from tests.factories import TEST_CLIENT_KEY, make_client_app, make_user
from tests.providers.conftest import ledger_rows, update_policy
from tests.serving import handed

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

COMPLETE = "/api/v1/complete"
CHAT = "/v1/chat/completions"
STATUS = "/api/v1/status"
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
OTHER_KEY = "fgw_another-apps-key-00000000000000000000000000"
THIRD_KEY = "fgw_a-third-apps-key-0000000000000000000000000"
OPENAI_ERROR_FIELDS = {"message", "type", "param", "code"}


@dataclass(frozen=True)
class Endpoint:
    path: str

    def body(self, prompt: str = "Say hello.", **fields: Any) -> dict[str, Any]:
        if self.path == CHAT:
            return {"model": "auto", "messages": [{"role": "user", "content": prompt}], **fields}
        return {"prompt": prompt, **fields}

    def error(self, response: httpx.Response) -> dict[str, Any]:
        """The error object, checked to be in the endpoint's shape (OpenAI's on /v1/*)."""
        error = response.json()["error"]
        if self.path == CHAT:
            assert set(error) == OPENAI_ERROR_FIELDS, error
        else:
            assert {"code", "message"} <= set(error) <= {"code", "message", "field"}, error
        return error

    def text(self, response: httpx.Response) -> str:
        body = response.json()
        return body["choices"][0]["message"]["content"] if self.path == CHAT else body["text"]


BOTH = pytest.mark.parametrize(
    "endpoint",
    [pytest.param(Endpoint(COMPLETE), id="complete"), pytest.param(Endpoint(CHAT), id="chat")],
)


async def post(
    api: httpx.AsyncClient, endpoint: Endpoint, prompt: str = "Say hello.", **kwargs: Any
) -> httpx.Response:
    headers = kwargs.pop("headers", None)
    return await api.post(endpoint.path, json=endpoint.body(prompt, **kwargs), headers=headers)


async def add_app(gateway: Gateway, key: str, **fields: Any) -> ClientApp:
    """Another client app answering to `key`, in the snapshot the next request reads."""
    app = await sync_to_async(make_client_app)(key, **fields)
    gateway.snapshots.mark_stale()
    await gateway.snapshots.refresh()
    return app


def keyless(api: httpx.AsyncClient) -> httpx.AsyncClient:
    """The same client, sending no key from now on (the fixture sends the suite's by default)."""
    api.headers.pop("Authorization", None)
    return api


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# 401: no key, a bad key, a revoked or disabled one ----------------------------------------


@BOTH
async def test_it_refuses_a_request_without_a_key_before_any_provider_is_called(
    api, gateway, primary, secondary, endpoint
):
    response = await post(keyless(api), endpoint)
    assert response.status_code == 401
    assert endpoint.error(response)["code"] == "missing_api_key"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert (primary.calls, secondary.calls) == (0, 0)
    assert await ledger_rows(gateway) == []


@BOTH
@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {OTHER_KEY}", "Bearer " + "x" * 500, f"Basic {TEST_CLIENT_KEY}", "Bearer"],
)
async def test_it_refuses_a_key_it_does_not_know(api, gateway, primary, endpoint, authorization):
    response = await post(api, endpoint, headers={"Authorization": authorization})
    assert response.status_code == 401
    assert endpoint.error(response)["code"] == "invalid_api_key"
    assert "WWW-Authenticate" in response.headers
    assert primary.calls == 0
    assert await ledger_rows(gateway) == []


@BOTH
async def test_a_revoked_key_is_refused_as_revoked(api, gateway, primary, endpoint):
    assert (await post(api, endpoint)).status_code == 200
    app = await sync_to_async(ClientApp.objects.get)(name="suite")
    assert await sync_to_async(client_app_revoke)(app=app, actor=None)
    await gateway.snapshots.refresh()  # the revocation's change record marked it stale

    response = await post(api, endpoint)

    assert response.status_code == 401
    assert endpoint.error(response)["code"] == "revoked_api_key"
    assert primary.calls == 1
    assert len(await ledger_rows(gateway)) == 1


@BOTH
async def test_a_disabled_apps_key_is_refused_as_revoked(api, gateway, primary, endpoint):
    def disable() -> None:
        app = ClientApp.objects.get(name="suite")
        app.enabled = False
        row_save(row=app, actor=None)

    await sync_to_async(disable)()
    await gateway.snapshots.refresh()

    response = await post(api, endpoint)

    assert response.status_code == 401
    assert endpoint.error(response)["code"] == "revoked_api_key"
    assert primary.calls == 0


@BOTH
async def test_the_key_may_come_as_x_api_key(api, gateway, primary, endpoint):
    response = await post(keyless(api), endpoint, headers={"X-Api-Key": TEST_CLIENT_KEY})
    assert response.status_code == 200
    assert endpoint.text(response) == PRIMARY_TEXT


async def test_the_model_list_needs_a_key_too(api, gateway):
    response = await keyless(api).get("/v1/models")
    assert response.status_code == 401
    assert Endpoint(CHAT).error(response)["code"] == "missing_api_key"


async def test_a_wrong_x_api_key_is_refused(api, gateway, primary):
    response = await post(keyless(api), Endpoint(COMPLETE), headers={"X-Api-Key": OTHER_KEY})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


# The official SDK ----------------------------------------------------------------------------


def sdk(live_url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0, timeout=30)


async def test_the_sdk_with_a_wrong_key_raises_its_authentication_error(live_url, gateway, primary):
    async with sdk(live_url, OTHER_KEY) as client:
        with pytest.raises(openai.AuthenticationError) as raised:
            await client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "Say hello."}]
            )
    assert raised.value.code == "invalid_api_key"
    assert primary.calls == 0


async def test_the_sdk_with_the_right_key_is_answered(live_url, gateway, primary):
    async with sdk(live_url, TEST_CLIENT_KEY) as client:
        completion = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Say hello."}]
        )
    assert completion.choices[0].message.content == PRIMARY_TEXT


async def test_the_model_list_holds_auto_and_only_what_the_app_may_ask_for(live_url, gateway):
    await add_app(gateway, OTHER_KEY, name="narrow", allowed_models="ollama-local")
    await add_app(gateway, THIRD_KEY, name="cascade-only", allowed_models="")
    listed = {}
    for key in (TEST_CLIENT_KEY, OTHER_KEY, THIRD_KEY):
        async with sdk(live_url, key) as client:
            listed[key] = [model.id async for model in client.models.list()]
    assert listed[TEST_CLIENT_KEY] == [
        "auto",
        "ollama-local",
        "openai-cloud",
        "llama3.1:8b",
        "gpt-4o-mini",
    ]
    assert listed[OTHER_KEY] == ["auto", "ollama-local", "llama3.1:8b"]
    assert listed[THIRD_KEY] == ["auto"]
    async with sdk(live_url, OTHER_KEY + "x") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()


# Identity and permissions ----------------------------------------------------------------


@BOTH
async def test_the_ledger_names_the_keys_app_whatever_client_header_is_sent(
    api, gateway, primary, endpoint
):
    response = await post(api, endpoint, headers={"X-Client-Id": "someone-else"})
    assert response.status_code == 200
    [record] = await ledger_rows(gateway)
    assert record.client == "suite"


async def test_an_app_may_not_ask_for_a_provider_it_is_not_allowed(
    api, gateway, primary, secondary
):
    await add_app(gateway, OTHER_KEY, name="narrow", allowed_models="ollama-local")
    endpoint = Endpoint(CHAT)

    response = await post(api, endpoint, model="openai-cloud", headers=bearer(OTHER_KEY))

    assert response.status_code == 403
    error = endpoint.error(response)
    assert (error["code"], error["param"], error["type"]) == (
        "model_not_allowed",
        "model",
        "permission_error",
    )
    assert (primary.calls, secondary.calls) == (0, 0)
    assert await ledger_rows(gateway) == []
    allowed = await post(api, endpoint, model="ollama-local", headers=bearer(OTHER_KEY))
    assert allowed.status_code == 200 and primary.calls == 1


@BOTH
async def test_an_app_without_high_priority_may_not_send_it(api, gateway, primary, endpoint):
    await add_app(gateway, OTHER_KEY, name="plain", allow_high_priority=False)

    response = await post(api, endpoint, priority="high", headers=bearer(OTHER_KEY))

    assert response.status_code == 403
    assert endpoint.error(response)["code"] == "priority_not_allowed"
    assert primary.calls == 0
    normal = await post(api, endpoint, priority="normal", headers=bearer(OTHER_KEY))
    assert normal.status_code == 200


@BOTH
async def test_a_key_is_refused_from_an_origin_its_app_does_not_allow(
    api, gateway, primary, endpoint
):
    await add_app(gateway, OTHER_KEY, name="shop", allowed_origins="https://shop.example.com")
    headers = bearer(OTHER_KEY)

    refused = await post(api, endpoint, headers={**headers, "Origin": "https://evil.example.com"})
    assert refused.status_code == 403
    assert endpoint.error(refused)["code"] == "origin_not_allowed"
    assert primary.calls == 0

    allowed = await post(api, endpoint, headers={**headers, "Origin": "https://shop.example.com"})
    assert allowed.status_code == 200
    # A server sends no Origin: the allow-list is for browsers only.
    assert (await post(api, endpoint, headers=headers)).status_code == 200


async def test_an_app_without_cloud_stays_off_the_cloud_provider(api, gateway, primary, secondary):
    await add_app(gateway, OTHER_KEY, name="kiosk", allow_cloud=False)
    primary.stop()

    kept = await post(api, Endpoint(COMPLETE), "How do I reset my password?", **_as(OTHER_KEY))
    assert kept.json()["tier"] == "static"
    degraded = await post(api, Endpoint(COMPLETE), "Write a limerick.", **_as(OTHER_KEY))
    assert degraded.json()["tier"] == "degraded"
    assert secondary.calls == 0
    # The suite's app may use the cloud: the same request reaches it.
    assert (await post(api, Endpoint(COMPLETE), "Write a limerick.")).json()["provider"] == (
        "openai-cloud"
    )


def _as(key: str) -> dict[str, Any]:
    return {"headers": bearer(key)}


# Rate limits ---------------------------------------------------------------------------------


async def _spent(gateway: Gateway, budget: Budget, now: float) -> float:
    key = spend_key(budget.pk, budget.period, now)[0]
    _, spent = await gateway.store.read("openai-cloud", [key])
    return spent.get(key, 0.0)


@BOTH
async def test_the_request_past_the_apps_limit_is_a_429_that_calls_and_charges_nothing(
    api, gateway, clock, primary, secondary, endpoint
):
    budget = await sync_to_async(Budget.objects.create)(
        scope="all", period="day", cap=Decimal("10")
    )
    await add_app(gateway, OTHER_KEY, name="metered", requests_per_minute=3)
    primary.stop()  # the cloud answers, so each admitted request is charged

    for n in range(3):
        answered = await post(api, endpoint, f"Write limerick {n}.", **_as(OTHER_KEY))
        assert answered.status_code == 200 and endpoint.text(answered) == SECONDARY_TEXT
    spent = await _spent(gateway, budget, clock.wall())
    assert spent > 0

    response = await post(api, endpoint, "Write limerick 4.", **_as(OTHER_KEY))

    assert response.status_code == 429
    error = endpoint.error(response)
    assert error["code"] == "rate_limit_exceeded" and "3 requests a minute" in error["message"]
    assert response.headers["Retry-After"].isdigit()
    assert int(response.headers["Retry-After"]) >= 1
    assert secondary.calls == 3
    assert await _spent(gateway, budget, clock.wall()) == spent
    assert len(await ledger_rows(gateway)) == 3


async def test_the_window_slides_the_limit_away_as_the_clock_moves(api, gateway, clock, primary):
    await add_app(gateway, OTHER_KEY, name="metered", requests_per_minute=2)
    for _ in range(2):
        assert (await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))).status_code == 200
    refused = await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))
    assert refused.status_code == 429

    clock.advance(int(refused.headers["Retry-After"]))

    assert (await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))).status_code == 200


async def test_the_request_after_the_token_limit_is_reached_is_a_429_naming_tokens(
    api, gateway, primary
):
    await add_app(gateway, OTHER_KEY, name="wordy", requests_per_minute=0, tokens_per_minute=10)
    used = 0
    answered = 0
    while used < 10:
        response = await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))
        assert response.status_code == 200, "a request was refused before the limit"
        used += response.json()["tokens_in"] + response.json()["tokens_out"]
        answered += 1
    assert answered < 5  # each answer costs tokens: the loop is bounded by the limit

    response = await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))

    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "10 tokens a minute" in error["message"]
    assert int(response.headers["Retry-After"]) >= 1
    assert primary.calls == answered


async def test_a_request_answered_without_a_provider_still_counts_toward_the_limit(
    api, gateway, primary, secondary
):
    await add_app(gateway, OTHER_KEY, name="kiosk", allow_cloud=False, requests_per_minute=2)
    primary.stop()  # the static tier answers: no provider call records the request
    for _ in range(2):
        answered = await post(
            api, Endpoint(COMPLETE), "How do I reset my password?", **_as(OTHER_KEY)
        )
        assert answered.json()["tier"] == "static"

    response = await post(api, Endpoint(COMPLETE), "How do I reset my password?", **_as(OTHER_KEY))

    assert response.status_code == 429
    assert secondary.calls == 0


async def test_one_apps_use_does_not_limit_another(api, gateway, primary):
    await add_app(gateway, OTHER_KEY, name="busy", requests_per_minute=1)
    await add_app(gateway, THIRD_KEY, name="quiet", requests_per_minute=1)
    assert (await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))).status_code == 200
    assert (await post(api, Endpoint(COMPLETE), **_as(OTHER_KEY))).status_code == 429

    assert (await post(api, Endpoint(COMPLETE), **_as(THIRD_KEY))).status_code == 200
    # The suite's app has no limit at all.
    assert (await post(api, Endpoint(COMPLETE))).status_code == 200


# Anonymous access (a public website widget) ------------------------------------------------


async def _anonymous_allowed(gateway, **values: Any) -> None:
    await update_policy(
        gateway,
        anonymous_access=True,
        anonymous_requests_per_minute=2,
        anonymous_tokens_per_minute=0,
        **values,
    )


@BOTH
async def test_anonymous_requests_are_answered_and_recorded_as_anonymous(
    api, gateway, primary, endpoint
):
    await _anonymous_allowed(gateway)
    response = await post(keyless(api), endpoint, headers={"X-Client-Id": "suite"})
    assert response.status_code == 200
    assert endpoint.text(response) == PRIMARY_TEXT
    [record] = await ledger_rows(gateway)
    assert record.client == "anonymous"


async def test_the_third_anonymous_request_from_one_address_in_a_minute_is_a_429(
    api, gateway, primary
):
    from failover_site.asgi import application

    await _anonymous_allowed(gateway)
    anonymous = keyless(api)
    # With no proxy trusted (TRUSTED_PROXY_HOPS=0), X-Forwarded-For is the client's to forge:
    # a new one on each request doesn't open a new window.
    for n in range(2):
        spoofed = {"X-Forwarded-For": f"198.51.100.{n}"}
        assert (await post(anonymous, Endpoint(COMPLETE), headers=spoofed)).status_code == 200

    response = await post(anonymous, Endpoint(COMPLETE), headers={"X-Forwarded-For": "192.0.2.7"})

    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(response.headers["Retry-After"]) >= 1
    assert primary.calls == 2
    # Another address has a window of its own.
    transport = httpx.ASGITransport(app=handed(application, gateway), client=("10.0.0.9", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as other:
        assert (await post(other, Endpoint(COMPLETE))).status_code == 200


@BOTH
async def test_with_anonymous_origins_set_another_origin_or_none_is_refused(
    api, gateway, primary, endpoint
):
    await _anonymous_allowed(gateway, anonymous_origins="https://widget.example.com")
    anonymous = keyless(api)

    allowed = await post(anonymous, endpoint, headers={"Origin": "https://widget.example.com"})
    elsewhere = await post(anonymous, endpoint, headers={"Origin": "https://evil.example.com"})
    no_origin = await post(anonymous, endpoint)

    assert allowed.status_code == 200
    for refused in (elsewhere, no_origin):
        assert refused.status_code == 403
        assert endpoint.error(refused)["code"] == "origin_not_allowed"
    assert primary.calls == 1


async def test_anonymous_requests_may_not_name_a_provider_or_send_high_priority(
    api, gateway, primary, secondary
):
    await _anonymous_allowed(gateway)
    anonymous = keyless(api)

    by_name = await post(anonymous, Endpoint(CHAT), model="ollama-local")
    high = await post(anonymous, Endpoint(COMPLETE), priority="high")

    assert by_name.status_code == 403
    assert Endpoint(CHAT).error(by_name)["code"] == "model_not_allowed"
    assert high.status_code == 403
    assert Endpoint(COMPLETE).error(high)["code"] == "priority_not_allowed"
    assert (primary.calls, secondary.calls) == (0, 0)


async def test_anonymous_requests_stay_off_the_cloud_unless_the_policy_allows_it(
    api, gateway, primary, secondary
):
    await _anonymous_allowed(gateway, anonymous_allow_cloud=False)
    primary.stop()
    anonymous = keyless(api)

    body = (await post(anonymous, Endpoint(COMPLETE), "How do I reset my password?")).json()

    assert body["tier"] == "static"
    assert secondary.calls == 0
    await _anonymous_allowed(gateway, anonymous_allow_cloud=True)
    body = (await post(anonymous, Endpoint(COMPLETE), "Write a limerick.")).json()
    assert body["provider"] == "openai-cloud"


# GET /api/v1/status ------------------------------------------------------------------------


async def test_the_status_needs_a_key(api, gateway):
    response = await keyless(api).get(STATUS)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"
    assert "WWW-Authenticate" in response.headers


async def test_the_status_refuses_a_key_whose_app_may_not_read_it(api, gateway):
    await add_app(gateway, OTHER_KEY, name="frontend", can_read_status=False)
    response = await api.get(STATUS, headers=bearer(OTHER_KEY))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "status_not_allowed"
    bad = await api.get(STATUS, headers=bearer(OTHER_KEY + "x"))
    assert bad.status_code == 401


async def test_the_status_answers_a_key_that_may_read_it(api, gateway):
    response = await api.get(STATUS)
    assert response.status_code == 200
    assert [p["name"] for p in response.json()["providers"]] == ["ollama-local", "openai-cloud"]


def _session_cookie(*, staff: bool, perms: tuple[str, ...] = ()) -> str:
    """A signed-in admin session, as the browser holds it after logging in."""
    client = Client()
    client.force_login(make_user(staff=staff, perms=perms))
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def test_the_status_answers_the_session_of_staff_who_may_see_the_live_status(api, gateway):
    cookie = await sync_to_async(_session_cookie)(staff=True, perms=("providers.view_status",))
    response = await keyless(api).get(STATUS, headers={"Cookie": cookie})
    assert response.status_code == 200
    assert "providers" in response.json()


async def test_the_status_refuses_the_session_of_staff_without_the_live_status_permission(
    api, gateway
):
    cookie = await sync_to_async(_session_cookie)(staff=True)
    response = await keyless(api).get(STATUS, headers={"Cookie": cookie})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "status_not_allowed"


async def test_the_status_refuses_a_session_that_is_not_staff_or_not_signed_in(api, gateway):
    cookie = await sync_to_async(_session_cookie)(staff=False)
    anonymous = keyless(api)
    assert (await anonymous.get(STATUS, headers={"Cookie": cookie})).status_code == 401
    made_up = f"{settings.SESSION_COOKIE_NAME}=not-a-session"
    assert (await anonymous.get(STATUS, headers={"Cookie": made_up})).status_code == 401
