"""Secrets stay secret: a provider or an alert channel may only name a secret variable the
allow-list takes (never one of the platform's own settings), checked in the form, in the model
and again when the key is read; and a key an upstream echoes back reaches no response, log
line, ledger row, alert or page (the canary)."""

from __future__ import annotations

import asyncio
import base64
import html
import json
import logging
import re
import secrets
import string
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from django.conf import global_settings
from django.core.exceptions import ValidationError
from django.test import AsyncClient
from django.urls import reverse

from alerts.channels import TransportError, channel_for
from alerts.channels.base import env_secret
from alerts.delivery import deliver_event
from alerts.models import AlertChannel, AlertEvent
from billing.models import CallRecord
from devtools.fake_provider import FakeProvider
from devtools.fake_receiver import FakeReceiver
from gateway.engine.breaker import Mode
from gateway.sentinel.checks import sentinel_run
from providers.models import Provider
from providers.models.secret_env import secret_env_problem
from tests.admin_forms import change_form_data
from tests.alerts.builders import make_event
from tests.factories import make_provider
from tests.providers.conftest import ask, ledger_rows

SETTINGS_SOURCE = Path(__file__).resolve().parents[2] / "failover_site" / "settings.py"
# A value the server's environment holds under a name no operator may point a provider at.
SERVER_SECRET = "the-servers-own-secret-0000000000000000000000000000"


@pytest.fixture
def operator(client, admin_user):
    client.force_login(admin_user)
    return admin_user


# The rule ---------------------------------------------------------------------------------


@pytest.mark.backend_free
@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "SLACK_WEBHOOK_URL",
        "ALERT_WEBHOOK_SECRET",
        "FAILOVER_SECRET_VLLM_KEY",
    ],
)
def test_the_demos_names_and_the_prefix_are_allowed(name):
    assert secret_env_problem(name) == ""


@pytest.mark.backend_free
def test_a_name_neither_prefixed_nor_listed_is_refused_saying_what_would_do():
    problem = secret_env_problem("AWS_SECRET_ACCESS_KEY")
    assert problem.startswith("AWS_SECRET_ACCESS_KEY is not an allowed secret variable")
    assert "FAILOVER_SECRET_" in problem and "SECRET_ENV_NAMES" in problem


@pytest.mark.backend_free
def test_the_lists_come_from_the_settings_and_replace_the_defaults(settings):
    settings.SECRET_ENV_PREFIXES = ["ACME_"]
    settings.SECRET_ENV_NAMES = ["VLLM_TOKEN"]
    assert secret_env_problem("ACME_OPENAI") == secret_env_problem("VLLM_TOKEN") == ""
    assert "not an allowed secret variable" in secret_env_problem("OPENAI_API_KEY")


def _variables_the_settings_read() -> set[str]:
    source = SETTINGS_SOURCE.read_text(encoding="utf-8")
    return set(re.findall(r'(?:env(?:\.\w+)?|environ\.get)\(\s*"([A-Z][A-Z0-9_]*)"', source))


@pytest.mark.backend_free
def test_the_platforms_own_variables_are_refused_even_when_an_operator_allows_them(settings):
    read = _variables_the_settings_read()
    assert {"SECRET_KEY", "DATABASE_URL", "DATABASE_CONN_MAX_AGE", "EMAIL_URL"} <= read
    platform = read | {"REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    platform |= {name for name in dir(global_settings) if name.isupper()}
    # Everything allowed by a prefix, and the platform's names listed one by one besides.
    settings.SECRET_ENV_PREFIXES = [*string.ascii_uppercase, "_"]
    settings.SECRET_ENV_NAMES = sorted(platform)
    allowed = sorted(name for name in platform if not secret_env_problem(name))
    assert allowed == []
    assert "one of the platform's own settings" in secret_env_problem("SECRET_KEY")
    assert secret_env_problem("ANY_OTHER_NAME") == ""  # the prefixes did take effect


# Providers: the form, the model, the read -------------------------------------------------


@pytest.mark.django_db
def test_the_admin_form_refuses_secret_key_as_a_providers_key_variable(client, operator):
    provider = make_provider(kind="openai", base_url="https://api.openai.com")
    url = reverse("admin:providers_provider_change", args=[provider.pk])
    response = client.post(url, change_form_data(client, url, api_key_env="SECRET_KEY"))
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["api_key_env"][0].startswith("SECRET_KEY is one of the platform's own")
    provider.refresh_from_db()
    assert provider.api_key_env == ""


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "HOME"])
def test_the_model_refuses_the_name_so_services_and_commands_do_too(name):
    provider = Provider(
        name="p", kind="openai", base_url="https://x.example", model="m", api_key_env=name
    )
    with pytest.raises(ValidationError) as caught:
        provider.full_clean()
    assert caught.value.message_dict["api_key_env"][0].startswith(name)


@pytest.mark.django_db
def test_a_row_saved_around_the_validation_shows_why_its_key_is_unusable(
    client, operator, monkeypatch
):
    monkeypatch.setenv("SECRET_KEY", SERVER_SECRET)
    provider = make_provider(kind="openai", base_url="https://api.openai.com")
    Provider.objects.filter(pk=provider.pk).update(api_key_env="SECRET_KEY")
    provider.refresh_from_db()
    assert provider.api_key_configured is False
    page = client.get(reverse("admin:providers_provider_changelist")).content.decode()
    assert "SECRET_KEY is one of the platform&#x27;s own settings" in page
    assert SERVER_SECRET not in page


@pytest.mark.django_db(transaction=True)
async def test_at_call_time_a_refused_variable_reads_as_unset_and_nothing_is_sent(
    api, gateway, primary, secondary, monkeypatch
):
    monkeypatch.setenv("SECRET_KEY", SERVER_SECRET)
    # Ahead of the primary, so it would be the one called.
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        api_key_env="SECRET_KEY", priority=5
    )
    await gateway.snapshots.refresh()
    cloud = (await gateway.snapshots.current()).provider("openai-cloud")
    assert cloud is not None and cloud.api_key == ""
    assert cloud.api_key_problem.startswith("SECRET_KEY is one of the platform's own settings")

    body = (await ask(api, "Write a limerick.")).json()

    assert body["provider"] == "ollama-local" and secondary.calls == 0
    [record] = await ledger_rows(gateway)
    assert record.attempts[0] == {
        "provider": "openai-cloud",
        "outcome": "skipped",
        "error_class": "api_key_missing",
    }
    checks = {found.name: found.result for found in await sentinel_run(gateway)}
    assert "SECRET_KEY is one of the platform's own settings" in checks["openai-cloud"].detail
    assert secondary.calls == 0  # the sentinel didn't send it either


# Alert channels: the form, the model, the read --------------------------------------------


@pytest.mark.django_db
def test_the_admin_form_refuses_secret_key_as_a_telegram_token_variable(client, operator):
    url = reverse("admin:alerts_alertchannel_add")
    config = {"bot_token_env": "SECRET_KEY", "chat_id": 42}
    data = change_form_data(client, url, name="ops-tg", kind="telegram", config=json.dumps(config))
    response = client.post(url, data)
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["config"]
    assert error.startswith("bot_token_env: SECRET_KEY is one of the platform's own settings")
    assert not AlertChannel.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "config"),
    [
        ("telegram", {"bot_token_env": "DATABASE_URL", "chat_id": 42}),
        ("slack", {"webhook_url_env": "EMAIL_URL"}),
        ("webhook", {"url": "https://ops.example/hook", "secret_env": "HOME"}),
    ],
)
def test_each_channel_secret_variable_is_checked_by_the_model(kind, config):
    channel = AlertChannel(name="ops", kind=kind, config=config)
    with pytest.raises(ValidationError) as caught:
        channel.full_clean()
    [error] = caught.value.message_dict["config"]
    name = next(value for key, value in config.items() if key.endswith("_env"))
    assert f": {name} is " in error


@pytest.mark.django_db
def test_at_send_time_a_telegram_channel_naming_secret_key_sends_nothing(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SERVER_SECRET)
    monkeypatch.setenv("FAILOVER_SECRET_TEST_TG", "123456:a-real-looking-bot-token")
    with FakeReceiver() as receiver:
        channel = AlertChannel(
            name="ops-tg",
            kind="telegram",
            config={
                "bot_token_env": "FAILOVER_SECRET_TEST_TG",
                "chat_id": 42,
                "api_base_url": receiver.telegram_base_url,
            },
            min_severity="info",
        )
        channel.full_clean()
        channel.save()
        saved_around = {**channel.config, "bot_token_env": "SECRET_KEY"}
        AlertChannel.objects.filter(pk=channel.pk).update(config=saved_around)

        deliver_event(make_event().pk, sleep=lambda seconds: None)

        assert receiver.messages == []
    channel.refresh_from_db()
    assert channel.enabled is False
    assert "SECRET_KEY is one of the platform's own settings" in channel.disabled_reason
    assert SERVER_SECRET not in channel.disabled_reason


@pytest.mark.backend_free
def test_reading_a_refused_variable_is_a_permanent_error_even_when_it_is_set(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", SERVER_SECRET)
    with pytest.raises(TransportError) as caught:
        env_secret("SECRET_KEY", "Telegram bot token")
    assert caught.value.permanent
    assert caught.value.message.startswith("The Telegram bot token can't be read: SECRET_KEY")
    assert SERVER_SECRET not in caught.value.message


# The canary -------------------------------------------------------------------------------

HELLO = [{"role": "user", "content": "Say hello."}]
CANARY_ENV = "FAILOVER_SECRET_CANARY"
MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}


async def _requests(api) -> list[Any]:
    """One of each: the frontends' endpoint, OpenAI's whole and streamed."""
    return [
        await ask(api, "Say hello."),
        await api.post("/v1/chat/completions", json={"model": "auto", "messages": HELLO}),
        await api.post(
            "/v1/chat/completions", json={"model": "auto", "messages": HELLO, "stream": True}
        ),
    ]


def _canary_forms(canary: str) -> dict[str, str]:
    """The canary in each shape a leak takes: whole, either half, spelt out with spaces, its
    bearer header in base64, URL-encoded."""
    half = len(canary) // 2
    return {
        "whole": canary,
        "first half": canary[:half],
        "last half": canary[half:],
        "spaced": " ".join(canary[i : i + 4] for i in range(0, len(canary), 4)),
        "base64": base64.b64encode(f"Bearer {canary}".encode()).decode()[12:-4],
        "url-encoded": quote(canary, safe=""),
    }


def _leaks(text: str, forms: dict[str, str]) -> list[str]:
    return [shape for shape, form in forms.items() if form in text]


def _response_text(response: Any) -> str:
    headers = "\n".join(f"{name}: {value}" for name, value in response.headers.items())
    return f"{response.status_code}\n{headers}\n{response.text}"


async def _alert_for(provider: str, timeout: float = 10.0) -> AlertEvent:
    """The credentials alert the 401 raised: handed over off the request's path, so polled."""
    deadline = time.monotonic() + timeout
    query = AlertEvent.objects.filter(kind="credentials", key=f"credentials:{provider}")
    while True:
        event = await sync_to_async(query.first)()
        if event is not None:
            return event
        assert time.monotonic() < deadline, "no credentials alert in time"
        await asyncio.sleep(0.05)


async def _admin_pages(admin_user: Any) -> str:
    """The call records and the alert events as an operator reads them: lists and pages."""
    client = AsyncClient()
    await client.aforce_login(admin_user)
    urls = [reverse("admin:billing_callrecord_changelist")]
    urls += [
        reverse("admin:billing_callrecord_change", args=[pk])
        async for pk in CallRecord.objects.values_list("pk", flat=True)
    ]
    urls.append(reverse("admin:alerts_alertevent_changelist"))
    urls += [
        reverse("admin:alerts_alertevent_change", args=[pk])
        async for pk in AlertEvent.objects.values_list("pk", flat=True)
    ]
    pages = []
    for url in urls:
        response = await client.get(url)
        assert response.status_code == 200, url
        pages.append(response.content.decode())
    return "\n".join(pages)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_key_the_upstream_echoes_reaches_no_response_log_ledger_alert_or_page(
    kind, api, gateway, primary, monkeypatch, caplog, admin_user
):
    # With a '+' and a '/', so that its URL-encoded form is a shape of its own.
    canary = f"sk-canary-{secrets.token_hex(8)}+{secrets.token_hex(4)}/{secrets.token_hex(4)}"
    forms = _canary_forms(canary)
    monkeypatch.setenv(CANARY_ENV, canary)
    caplog.set_level(logging.INFO)
    name = f"leaky-{secrets.token_hex(3)}"  # its own alert throttle key, fresh each run
    with FakeProvider(models=[MODELS[kind]], api_key=canary, echo_key=True) as leaky:
        provider = Provider(
            name=name,
            kind=kind,
            base_url=leaky.url,
            model=MODELS[kind],
            api_key_env=CANARY_ENV,
            priority=5,  # ahead of the primary, which answers once it has failed
            timeout_s=5,
        )
        await sync_to_async(provider.full_clean)()
        await sync_to_async(provider.save)()
        await gateway.snapshots.refresh()
        # Every call reaches it: a 401 would otherwise open its breaker at once.
        await gateway.store.set_mode(name, Mode.FORCED_CLOSED)

        responses = []
        for mode in ("unauthorized", "bad_request", "error", "stream_error"):
            leaky.set_fault(mode=mode)
            responses += await _requests(api)
        calls = leaky.calls
        # Its health check, the key refused and quoted back: the sentinel logs what it heard.
        leaky.set_fault(mode="ok", api_key="sk-the-one-it-wants-instead")
        checks = {found.name: found.result for found in await sentinel_run(gateway)}

    assert calls == len(responses) == 12  # every request met the echoing upstream
    statuses = [response.status_code for response in responses]
    assert statuses.count(400) == 3 and set(statuses) == {200, 400}
    refused = responses[3].json()["error"]
    assert refused["message"].endswith(f"request {responses[3].headers['X-Request-Id']}.")
    assert "[redacted]" in checks[name].detail and _leaks(checks[name].detail, forms) == []
    assert [r for r in responses if _leaks(_response_text(r), forms)] == []
    assert [r for r in responses if "the request carried" in r.text] == []  # no upstream text
    # The stream broke mid-answer: its last event says so.
    assert re.search(r'"code":\s*"stream_interrupted"', responses[-1].text)

    rows = await ledger_rows(gateway, at_least=12)  # the last was a stream: its row comes after
    assert len(rows) == 12
    ledger = json.dumps(
        await sync_to_async(lambda: list(CallRecord.objects.values()))(), default=str
    )
    assert _leaks(ledger, forms) == []
    assert "its halves [redacted]" in ledger  # the fake did quote every shape
    # The operator still reads what the upstream said, scrubbed.
    assert (
        ledger.count("the request carried authorization: Bearer [redacted]")
        + ledger.count("the request carried x-api-key: [redacted]")
        >= 12
    )

    event = await _alert_for(name)
    alert = json.dumps(
        await sync_to_async(lambda: list(AlertEvent.objects.values()))(), default=str
    )
    assert _leaks(alert, forms) == [] and "[redacted]" in event.message
    with FakeReceiver() as receiver:
        hook = AlertChannel(kind="webhook", config={"url": f"{receiver.url}/hook/ops"})
        await sync_to_async(channel_for(hook).send)(event.as_alert())
        [sent] = receiver.messages
    assert _leaks(sent.body.decode(), forms) == [] and "[redacted]" in sent.body.decode()

    pages = await _admin_pages(admin_user)
    assert _leaks(pages, forms) == [] and _leaks(html.unescape(pages), forms) == []

    logged = caplog.text + "\n".join(record.getMessage() for record in caplog.records)
    assert f"sentinel: {name} check failed" in logged  # the warning is there, scrubbed
    assert _leaks(logged, forms) == []
