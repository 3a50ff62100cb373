"""A secret goes only where it belongs: each secret variable is bound to the destinations it
may be sent to (scheme, host and port), checked when a provider or an alert channel is saved and
again where the secret is sent, so no one allowed to edit one row can send another row's secret
to a server of theirs, nor to another listener on a host it may reach. The rule itself:
test_secret_destination_rule.py.

The tests' own servers are on loopback, which the embedded mode opens to every secret: each
test here turns that off (`bound`), as a production deployment has it, and declares what it
needs like a deployment would."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.urls import reverse

from alerts.delivery import send_test_alert
from alerts.models import AlertChannel
from devtools.fake_provider import FakeProvider
from devtools.fake_receiver import FakeReceiver
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.pool import AdapterPool
from gateway.engine.config import ProviderConfig
from gateway.engine.secret_destinations import destinations_parse
from gateway.sentinel.checks import sentinel_run
from providers.models import Provider
from runtime.gateway import settings_for_clients
from tests.admin_forms import change_form_data
from tests.factories import make_provider, make_user
from tests.outbound import LocalDns
from tests.providers.conftest import ask, ledger_rows

TELEGRAM_TOKEN = "7251849302:AAF-the-operators-real-bot-token-x9Q2"
OPENAI_KEY = "sk-proj-the-operators-real-openai-key-0f3a9c"


@pytest.fixture
def bound(settings, monkeypatch):
    """A production deployment's bindings: loopback closed, the vendors' names to their
    vendors, and the real secrets in the environment."""
    settings.SECRET_DESTINATIONS_LOOPBACK = False
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    return settings


def _declare(settings, *entries: str) -> None:
    """Declare `NAME=destination` entries, as SECRET_DESTINATIONS in the environment would."""
    settings.SECRET_DESTINATIONS = {**settings.SECRET_DESTINATIONS, **destinations_parse(entries)}


def _config(base_url: str, *, key: str, env: str, name: str = "cloud") -> ProviderConfig:
    return ProviderConfig(
        name=name,
        kind="openai",
        base_url=base_url,
        model="gpt-4o-mini",
        priority=10,
        is_local=False,
        timeout_s=5.0,
        context_window=8192,
        api_key=key,
        api_key_env=env,
    )


# Providers --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_provider_editor_cannot_point_the_telegram_token_at_a_server_of_theirs(client, bound):
    editor = make_user(perms=("providers.view_provider", "providers.change_provider"))
    client.force_login(editor)
    provider = make_provider(kind="openai", base_url="https://api.openai.com", api_key_env="")
    url = reverse("admin:providers_provider_change", args=[provider.pk])
    data = change_form_data(
        client, url, api_key_env="TELEGRAM_BOT_TOKEN", base_url="http://127.0.0.1:9/v1"
    )
    response = client.post(url, data)
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["api_key_env"]
    assert error == (
        "TELEGRAM_BOT_TOKEN may be sent only to https://api.telegram.org:443, not to "
        "http://127.0.0.1:9."
    )
    provider.refresh_from_db()
    assert (provider.api_key_env, provider.base_url) == ("", "https://api.openai.com")


@pytest.mark.django_db
def test_the_model_refuses_a_key_bound_elsewhere_so_services_and_commands_do_too(bound):
    provider = Provider(
        name="p",
        kind="openai",
        base_url="http://127.0.0.1:9",
        model="m",
        api_key_env="OPENAI_API_KEY",
    )
    with pytest.raises(ValidationError) as caught:
        provider.full_clean()
    assert caught.value.message_dict["api_key_env"] == [
        "OPENAI_API_KEY may be sent only to https://api.openai.com:443, not to http://127.0.0.1:9."
    ]


@pytest.mark.django_db
def test_a_deployment_declares_where_its_own_secret_may_go(bound, monkeypatch):
    monkeypatch.setenv("FAILOVER_SECRET_VLLM_KEY", "vllm-key-0000000000")
    _declare(bound, "FAILOVER_SECRET_VLLM_KEY=http://127.0.0.1:8001")
    provider = make_provider(
        kind="openai", base_url="http://127.0.0.1:8001", api_key_env="FAILOVER_SECRET_VLLM_KEY"
    )
    provider.full_clean()
    assert provider.api_key_configured
    provider.base_url = "http://127.0.0.1:8002"  # another listener on the same host
    with pytest.raises(ValidationError) as caught:
        provider.full_clean()
    assert caught.value.message_dict["api_key_env"] == [
        "FAILOVER_SECRET_VLLM_KEY may be sent only to http://127.0.0.1:8001, not to "
        "http://127.0.0.1:8002."
    ]
    assert not provider.api_key_configured


@pytest.mark.django_db(transaction=True)
async def test_a_key_saved_around_the_check_is_never_sent_to_the_wrong_host(
    api, gateway, primary, bound
):
    with FakeProvider(models=["gpt-4o-mini"]) as collector:
        # Ahead of the primary, so it would be the one called; saved with .update(): no check.
        await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
            api_key_env="TELEGRAM_BOT_TOKEN", base_url=collector.url, priority=5
        )
        await gateway.snapshots.refresh()
        cloud = (await gateway.snapshots.current()).provider("openai-cloud")
        assert cloud is not None and cloud.api_key == ""
        assert cloud.api_key_problem.startswith("TELEGRAM_BOT_TOKEN may be sent only to")

        body = (await ask(api, "Write a limerick.")).json()
        checks = {found.name: found.result for found in await sentinel_run(gateway)}

        assert collector.last_request("/v1/models") is None
        assert collector.last_request("/v1/chat/completions") is None
    assert body["provider"] == "ollama-local"
    [record] = await ledger_rows(gateway)
    assert record.attempts[0]["error_class"] == "api_key_missing"
    assert "TELEGRAM_BOT_TOKEN may be sent only to https://api.telegram.org:443" in (
        checks["openai-cloud"].detail
    )
    assert TELEGRAM_TOKEN not in checks["openai-cloud"].detail


@pytest.mark.django_db
async def test_the_pool_sends_a_key_only_to_a_host_its_variable_is_bound_to(bound):
    with FakeProvider(models=["gpt-4o-mini"]) as collector:
        config = _config(collector.url, key=TELEGRAM_TOKEN, env="TELEGRAM_BOT_TOKEN")
        pool = AdapterPool(settings_for_clients())
        adapter = pool.get(config)
        assert adapter is not None
        result = await adapter.health_check(timeout=5)
        with pytest.raises(ProviderError) as caught:
            await adapter.client.get("/models")
        await pool.aclose()
        assert collector.last_request("/v1/models") is None
    assert result.ok is False and result.error_class == ErrorClass.UPSTREAM_REJECTED
    assert caught.value.error_class == ErrorClass.UPSTREAM_REJECTED
    assert caught.value.message == (
        "not sent: TELEGRAM_BOT_TOKEN may be sent only to https://api.telegram.org:443, not to "
        f"{collector.url}"
    )


@pytest.mark.django_db
async def test_a_key_bound_to_one_port_is_not_sent_to_another_port_of_that_host(bound):
    key = "vllm-key-0000000000"
    with FakeProvider(models=["gpt-4o-mini"]) as own, FakeProvider(models=["gpt-4o-mini"]) as other:
        _declare(bound, f"FAILOVER_SECRET_VLLM_KEY={own.url}")
        pool = AdapterPool(settings_for_clients())
        right = pool.get(_config(own.url, key=key, env="FAILOVER_SECRET_VLLM_KEY"))
        wrong = pool.get(_config(other.url, key=key, env="FAILOVER_SECRET_VLLM_KEY", name="b"))
        assert right is not None and wrong is not None
        answered, refused = await right.health_check(timeout=5), await wrong.health_check(timeout=5)
        await pool.aclose()
        arrived = own.last_request("/v1/models")
        assert other.last_request("/v1/models") is None
    assert answered.ok and arrived is not None
    assert arrived["headers"]["authorization"] == f"Bearer {key}"
    assert refused.ok is False and refused.error_class == ErrorClass.UPSTREAM_REJECTED


@pytest.mark.django_db
async def test_a_name_under_localhost_gets_no_secret_even_in_the_embedded_mode(
    settings, monkeypatch
):
    settings.SECRET_DESTINATIONS_LOOPBACK = True  # DEBUG's opening to this machine
    dns = LocalDns(monkeypatch)  # no test asks the internet's DNS
    dns.add("evil.localhost", "93.184.215.14")  # a public answer: the URL policy lets it by
    provider = Provider(
        name="p", kind="openai", base_url="http://evil.localhost/v1", model="m",
        api_key_env="OPENAI_API_KEY",
    )  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        await sync_to_async(provider.full_clean)()
    looked_up = list(dns.lookups)
    pool = AdapterPool(settings_for_clients())
    adapter = pool.get(_config("http://evil.localhost/v1", key=OPENAI_KEY, env="OPENAI_API_KEY"))
    assert adapter is not None
    with pytest.raises(ProviderError) as refused:
        await adapter.client.get("/models")
    await pool.aclose()
    where = (
        "OPENAI_API_KEY may be sent only to https://api.openai.com:443, this machine (localhost or "
        "a loopback IP address, any port), not to http://evil.localhost:80"
    )
    assert caught.value.message_dict == {"api_key_env": [f"{where}."]}
    assert refused.value.message == f"not sent: {where}"
    assert dns.lookups == looked_up  # refused before any lookup: nothing was resolved to send it


# Alert channels ---------------------------------------------------------------------------


def _telegram(receiver: FakeReceiver, token_env: str) -> AlertChannel:
    return AlertChannel(
        name="ops-tg",
        kind="telegram",
        config={"bot_token_env": token_env, "chat_id": 42, "api_base_url": receiver.url},
        min_severity="info",
    )


@pytest.mark.django_db
def test_a_channel_editor_cannot_make_a_telegram_channel_carry_the_openai_key(client, bound):
    editor = make_user(
        perms=("alerts.add_alertchannel", "alerts.change_alertchannel", "alerts.view_alertchannel")
    )
    client.force_login(editor)
    with FakeReceiver(telegram_token=OPENAI_KEY) as collector:
        url = reverse("admin:alerts_alertchannel_add")
        config = {"bot_token_env": "OPENAI_API_KEY", "chat_id": 42, "api_base_url": collector.url}
        data = change_form_data(client, url, name="tg", kind="telegram", config=json.dumps(config))
        response = client.post(url, data)
        assert collector.messages == []
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["config"]
    assert error == (
        "bot_token_env: OPENAI_API_KEY may be sent only to https://api.openai.com:443, not to "
        f"{collector.url}."
    )
    assert not AlertChannel.objects.exists()


@pytest.mark.django_db
def test_a_test_alert_from_a_channel_saved_around_the_check_sends_nothing(client, bound):
    editor = make_user(perms=("alerts.change_alertchannel", "alerts.view_alertchannel"))
    client.force_login(editor)
    # The receiver would take the OpenAI key as its bot token: anything sent would land.
    with FakeReceiver(telegram_token=OPENAI_KEY) as collector:
        channel = _telegram(collector, "TELEGRAM_BOT_TOKEN")
        channel.save()
        AlertChannel.objects.filter(pk=channel.pk).update(
            config={**channel.config, "bot_token_env": "OPENAI_API_KEY"}
        )
        response = client.post(reverse("admin:alerts_alertchannel_send_test", args=[channel.pk]))
        assert collector.messages == []
    assert response.status_code == 302
    channel.refresh_from_db()
    assert channel.enabled is False
    assert (
        "OPENAI_API_KEY may be sent only to https://api.openai.com:443" in channel.disabled_reason
    )
    assert OPENAI_KEY not in channel.disabled_reason


@pytest.mark.django_db
def test_a_webhook_cannot_be_signed_with_another_rows_secret(bound):
    with FakeReceiver(hook_secret=OPENAI_KEY) as collector:
        channel = AlertChannel(
            name="hook",
            kind="webhook",
            config={"url": f"{collector.url}/hook/ops", "secret_env": "OPENAI_API_KEY"},
        )
        with pytest.raises(ValidationError) as caught:
            channel.full_clean()
        channel.save()
        [result] = send_test_alert(channel).deliveries
        assert collector.messages == []
    assert (
        "OPENAI_API_KEY may be sent only to https://api.openai.com:443" in caught.value.messages[0]
    )
    assert result["permanent"] and "OPENAI_API_KEY may be sent only to" in result["error"]


@pytest.mark.django_db
def test_a_slack_url_is_sent_only_to_slacks_host(bound, monkeypatch):
    with FakeReceiver() as collector:
        monkeypatch.setenv("SLACK_WEBHOOK_URL", f"{collector.url}/services/T0/B0/secret-path")
        channel = AlertChannel(
            name="sl", kind="slack", config={"webhook_url_env": "SLACK_WEBHOOK_URL"}
        )
        with pytest.raises(ValidationError) as caught:
            channel.full_clean()
        channel.save()
        [result] = send_test_alert(channel).deliveries
        assert collector.messages == []
    assert (
        "SLACK_WEBHOOK_URL may be sent only to https://hooks.slack.com:443"
        in caught.value.messages[0]
    )
    assert "secret-path" not in result["error"] and result["permanent"]


@pytest.mark.django_db
def test_a_channel_bound_to_its_host_still_delivers(bound, monkeypatch):
    monkeypatch.setenv("FAILOVER_SECRET_TEST_TG", TELEGRAM_TOKEN)
    with FakeReceiver(telegram_token=TELEGRAM_TOKEN) as receiver:
        _declare(bound, f"FAILOVER_SECRET_TEST_TG={receiver.url}")
        channel = _telegram(receiver, "FAILOVER_SECRET_TEST_TG")
        channel.full_clean()
        channel.save()
        [result] = send_test_alert(channel).deliveries
        assert len(receiver.messages) == 1
    assert result["ok"]


@pytest.mark.django_db
def test_a_webhook_secret_bound_to_one_receiver_is_not_sent_to_another_port(bound, monkeypatch):
    secret = "hook-secret-0000000000"
    monkeypatch.setenv("FAILOVER_SECRET_TEST_HOOK", secret)
    with FakeReceiver(hook_secret=secret) as own, FakeReceiver(hook_secret=secret) as other:
        _declare(bound, f"FAILOVER_SECRET_TEST_HOOK={own.url}")
        config = {"url": f"{other.url}/hook/ops", "secret_env": "FAILOVER_SECRET_TEST_HOOK"}
        channel = AlertChannel(name="hook", kind="webhook", config=config)
        with pytest.raises(ValidationError) as caught:
            channel.full_clean()
        channel.save()
        [result] = send_test_alert(channel).deliveries
        assert other.messages == []
    assert caught.value.messages == [
        f"secret_env: FAILOVER_SECRET_TEST_HOOK may be sent only to {own.url}, not to {other.url}."
    ]
    assert result["permanent"] and secret not in result["error"]
