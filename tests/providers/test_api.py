"""The frontends' endpoints answer every mistake with a 4xx naming it, in JSON."""

from __future__ import annotations

import json

import pytest

from tests.providers.conftest import ask, ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/complete"


async def _post(api, body, content_type="application/json"):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await api.post(URL, content=content, headers={"content-type": content_type})


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({}, "prompt", "required"),
        ({"prompt": 12}, "prompt", "must be a string"),
        ({"prompt": "   "}, "prompt", "blank"),
        ({"prompt": "x" * 32_001}, "prompt", "at most 32000"),
        ({"prompt": "hi", "system_prompt": ["be brief"]}, "system_prompt", "string"),
        ({"prompt": "hi", "max_tokens": "100"}, "max_tokens", "integer"),
        ({"prompt": "hi", "max_tokens": True}, "max_tokens", "integer"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens", "from 1 to"),
        ({"prompt": "hi", "max_tokens": 10**6}, "max_tokens", "from 1 to"),
        ({"prompt": "hi", "temperature": "hot"}, "temperature", "number"),
        ({"prompt": "hi", "temperature": 2.5}, "temperature", "from 0 to 2"),
        ({"prompt": "hi", "temperature": -0.1}, "temperature", "from 0 to 2"),
        ({"prompt": "hi", "priority": "urgent"}, "priority", "normal"),
        ({"prompt": "hi", "task": 7}, "task", "string"),
        ({"prompt": "hi", "task": "has spaces"}, "task", "letters, digits"),
        ({"prompt": "hi", "allow_cloud": "no"}, "allow_cloud", "true or false"),
        ({"prompt": "hi", "promt": "typo"}, "promt", "Unknown field"),
    ],
)
async def test_a_bad_field_is_a_400_naming_it(api, gateway, primary, body, field, fragment):
    response = await _post(api, body)
    error = response.json()["error"]
    assert response.status_code == 400
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert fragment in error["message"]
    assert primary.calls == 0


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b'["a", "list"]', "JSON object"),
        (b"\xff\xfe", "not"),
        (b'{"prompt": NaN}', "must be a string"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_a_400(api, gateway, raw, fragment):
    response = await _post(api, raw)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


async def test_a_body_over_64_kib_is_a_413(api, gateway, primary):
    response = await _post(api, {"prompt": "x" * 70_000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert primary.calls == 0


async def test_a_body_that_is_not_json_typed_is_a_415(api, gateway):
    response = await _post(api, b"prompt=hello", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


async def test_other_methods_are_a_405_with_allow(api, gateway):
    response = await api.get(URL)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


async def test_an_unknown_api_path_is_a_json_404(api, gateway):
    response = await api.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def _anthropics_404(body):
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    return body["error"]["message"]


def _openais_404(body):
    assert (body["error"]["type"], body["error"]["code"]) == ("invalid_request_error", "not_found")
    return body["error"]["message"]


def _gateways_404(body):
    assert set(body) == {"error"} and body["error"]["code"] == "not_found"
    return body["error"]["message"]


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/messages/batches", _anthropics_404),
        ("/v1/messages/batches/abc", _anthropics_404),
        ("/v1/messages/count_tokens/more", _anthropics_404),
        ("/v1/messagesx", _openais_404),
        ("/v1/nothing", _openais_404),
        ("/v1/chat/completions/abc", _openais_404),
        ("/api/v1/nothing", _gateways_404),
        ("/api/nothing", _gateways_404),
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_an_unknown_path_is_a_404_in_the_error_shape_of_the_door_it_is_under(
    api, gateway, primary, path, shape, method
):
    response = await api.request(method, path, json={"model": "auto"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert shape(response.json()) == f"No endpoint at {path}."
    assert primary.calls == 0


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_another_method_on_anthropics_door_is_a_405_in_its_error_shape(api, gateway, path):
    response = await api.get(path)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    body = response.json()
    assert (body["type"], body["error"]["type"]) == ("error", "invalid_request_error")


async def test_an_unknown_host_is_refused(api, gateway):
    response = await api.post(URL, json={"prompt": "hi"}, headers={"host": "evil.example"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_host"


async def test_a_well_formed_request_with_every_field_is_routed(api, gateway, primary):
    response = await ask(
        api,
        "Say hello.",
        system_prompt="Be brief.",
        max_tokens=3,
        temperature=0.2,
        priority="high",
        task="greeting",
        allow_cloud=False,
    )
    body = response.json()
    assert response.status_code == 200
    assert body["provider"] == "ollama-local"
    assert len(body["text"].split()) == 3  # max_tokens reached the provider
    assert set(body) == {
        "text",
        "provider",
        "tier",
        "is_fallback",
        "degradation_notice",
        "request_id",
        "latency_ms",
        "tokens_in",
        "tokens_out",
    }


async def test_status_shows_each_provider_and_the_kill_switch(api, gateway, primary):
    primary.set_fault(mode="error")
    for _ in range(3):
        await ask(api)
    body = (await api.get("/api/v1/status")).json()
    assert body["kill_switch"] == {"state": "off", "provider": None}
    local, cloud = body["providers"]
    assert local["name"] == "ollama-local" and cloud["name"] == "openai-cloud"
    assert local["breaker"]["state"] == "open"
    assert local["breaker"]["reason"] == "consecutive_failures"
    assert 0 < local["breaker"]["seconds_to_half_open"] <= 60
    assert local["window"]["calls"] == 3 and local["window"]["failure_rate_pct"] == 100.0
    assert cloud["breaker"]["state"] == "closed" and cloud["window"]["calls"] == 3
    assert cloud["window"]["p95_ms"] is not None
    assert body["state_store"]["ok"] is True
    assert local["sentinel"] == cloud["sentinel"] == "unknown"  # no sentinel run yet
    assert (local["health"], cloud["health"]) == ("down", "healthy")  # by the breaker


async def test_status_shows_the_sentinels_verdict(api, gateway, primary):
    from gateway.sentinel.checks import sentinel_run

    primary.set_fault(mode="error", scope="all")
    await sentinel_run(gateway)
    body = (await api.get("/api/v1/status")).json()
    local, cloud = body["providers"]
    assert (local["sentinel"], cloud["sentinel"]) == ("healthy", "healthy")  # one bad of 5
    for _ in range(2):
        await sentinel_run(gateway)
    local = (await api.get("/api/v1/status")).json()["providers"][0]
    assert local["sentinel"] == local["health"] == "degraded"  # 3 bad of the last 5


async def test_the_status_endpoint_and_the_control_room_say_the_same_health(api, gateway, primary):
    from asgiref.sync import sync_to_async

    from control_room.dashboard import control_status

    async def both() -> tuple[dict[str, str], dict[str, str]]:
        body = (await api.get("/api/v1/status")).json()
        panel = await sync_to_async(control_status)(gateway)
        return (
            {p["name"]: p["health"] for p in body["providers"]},
            {row.name: row.health for row in panel.providers},
        )

    assert await both() == ({"ollama-local": "healthy", "openai-cloud": "healthy"},) * 2
    primary.set_fault(mode="error")
    await ask(api, cache=False)  # one failure: the breaker stays closed, the window shows it
    api_says, panel_says = await both()
    assert api_says == panel_says == {"ollama-local": "degraded", "openai-cloud": "healthy"}
    for _ in range(2):
        await ask(api, cache=False)
    api_says, panel_says = await both()
    assert api_says == panel_says == {"ollama-local": "down", "openai-cloud": "healthy"}


async def test_status_shows_budget_use(api, gateway, providers_configured, primary):
    from decimal import Decimal

    from asgiref.sync import sync_to_async

    from billing.models import Budget

    await sync_to_async(Budget.objects.create)(scope="all", period="day", cap=Decimal("2"))
    await sync_to_async(Budget.objects.create)(
        scope="provider",
        provider=providers_configured["secondary"],
        period="month",
        cap=Decimal("1"),
    )
    primary.stop()
    await ask(api)
    body = (await api.get("/api/v1/status")).json()
    [all_traffic] = body["budgets"]
    assert all_traffic["cap"] == 2.0 and all_traffic["spent"] > 0
    cloud = body["providers"][1]
    assert cloud["budgets"][0]["period"] == "month" and cloud["budgets"][0]["spent"] > 0


async def test_a_declared_oversize_body_is_refused_before_it_is_read(api, gateway, primary):
    response = await api.post(
        URL, content=b"{" + b" " * 200_000 + b"}", headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


async def test_an_oversize_body_without_a_length_is_cut_off_as_it_arrives(api, gateway, primary):
    sent = 0

    async def endless():
        nonlocal sent
        for _ in range(1000):  # 16 MiB if nobody stops reading
            sent += 16_384
            yield b" " * 16_384

    response = await api.post(URL, content=endless(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert sent < 200_000  # the reader gave up after the limit, not at the end
    assert primary.calls == 0


async def test_status_refuses_an_unknown_host(api, gateway):
    response = await api.get("/api/v1/status", headers={"host": "evil.example"})
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("body", "code", "field", "fragment"),
    [
        (b'{"prompt": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "invalid_json", None, "nested"),
        (
            b'{"prompt": "Hi", "task": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}",
            "invalid_json",
            None,
            "nested",
        ),  # fmt: skip
        (b'{"prompt": "Hi \\ud800", "cache": false}', "invalid_field", "prompt", "surrogate"),
        (b'{"prompt": "Hi", "user": "\\udfff"}', "invalid_field", "user", "surrogate"),
        (b'{"prompt": "Hi", "\\ud800": 1}', "invalid_field", "\ud800", "surrogate"),
        # The same surrogate encoded as UTF-8 bytes, and a body in UTF-16: not UTF-8 text.
        (b'{"prompt": "Hi \xed\xa0\x80", "cache": false}', "invalid_json", None, "UTF-8"),
        ('{"prompt": "Hi"}'.encode("utf-16"), "invalid_json", None, "UTF-8"),
        # An integer past any float: out of range, not a crash.
        (
            b'{"prompt": "Hi", "temperature": 1' + b"0" * 400 + b"}",
            "invalid_field",
            "temperature",
            "from 0 to 2",
        ),
        (
            b'{"prompt": "Hi", "max_tokens": -1' + b"0" * 400 + b"}",
            "invalid_field",
            "max_tokens",
            "from 1 to",
        ),
    ],
    ids=[
        "deep-array",
        "deep-object",
        "surrogate-prompt",
        "surrogate-user",
        "surrogate-key",
        "surrogate-bytes",
        "utf-16",
        "huge-number",
        "huge-negative-integer",
    ],
)
async def test_a_body_no_provider_could_take_is_a_400_with_no_call_and_no_record(
    api, gateway, primary, body, code, field, fragment
):
    response = await api.post(
        "/api/v1/complete", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error.get("field")) == (code, field)
    assert fragment in error["message"]
    assert primary.calls == 0
    await gateway.ledger.flush()
    assert await ledger_rows(gateway) == []


async def test_an_escaped_pair_of_surrogates_is_text_like_any_other(api, gateway, primary):
    body = b'{"prompt": "Say hello \\ud83d\\ude00"}'
    response = await api.post(
        "/api/v1/complete", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200 and response.json()["tier"] == "primary"
