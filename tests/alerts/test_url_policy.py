"""The outbound URL policy for alert channels: a webhook or Telegram URL refused when it is saved,
a Slack URL refused when it is read, and every channel refused again where it connects, against
what the name resolves to then, with nothing sent; no redirect followed; a failed test alert
shows the status that answered, never the body."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import httpx
import pytest
from django.contrib.messages import get_messages
from django.core.exceptions import ValidationError
from django.urls import reverse

from alerts.channels import TransportError, WebhookChannel
from alerts.delivery import deliver_event, send_test_alert
from alerts.models import AlertChannel
from devtools.fake_receiver import FakeReceiver
from tests.alerts.builders import (
    SLACK_URL_ENV,
    make_channel,
    make_event,
    slack_channel,
    telegram_channel,
    webhook_channel,
)
from tests.outbound import LocalDns, RedirectServer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]


@pytest.fixture
def local_dns(monkeypatch: pytest.MonkeyPatch) -> LocalDns:
    return LocalDns(monkeypatch)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch, local_dns: LocalDns) -> None:
    """The package's guard, also letting through the names `local_dns` answers and internal
    addresses (the policy under test refuses those; none is the internet)."""
    real = httpx.HTTPTransport.handle_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        assert host == "localhost" or host in local_dns.names() or _internal(host), host
        return real(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle_request)


def _internal(host: str) -> bool:
    try:
        return not ipaddress.ip_address(host).is_global
    except ValueError:
        return False


def config_errors(kind: str, config: dict[str, Any]) -> list[str]:
    channel = AlertChannel(name="ops", kind=kind, config=config)
    with pytest.raises(ValidationError) as caught:
        channel.full_clean(validate_unique=False)
    return caught.value.message_dict["config"]


def _bypassing_checks(channel: AlertChannel, **config: Any) -> AlertChannel:
    """The channel's config changed with `.update()`: no model validation ran."""
    AlertChannel.objects.filter(pk=channel.pk).update(config={**channel.config, **config})
    channel.refresh_from_db()
    return channel


class TestWhenSaved:
    @pytest.mark.parametrize(
        ("url", "message"),
        [
            (
                "http://169.254.169.254/latest/meta-data",
                "url: blocked by the URL policy: 169.254.169.254 is a cloud metadata address "
                "(never allowed).",
            ),
            (
                "file:///etc/passwd",
                "url: enter an http:// or https:// URL (not 'file:///etc/passwd').",
            ),
            (
                "http://user:pw@ops.example.com/hook",
                "url: blocked by the URL policy: a URL can't carry a user name or password "
                "(keep secrets in the environment).",
            ),
            (
                "https://ops.example.com/hook?x=",
                "url: blocked by the URL policy: a URL can't have a query string (?…).",
            ),
            (
                "https://ops.example.com/hook#part",
                "url: blocked by the URL policy: a URL can't have a fragment (#…).",
            ),
        ],
    )
    def test_a_webhook_url_is_refused_with_a_clear_message(self, url, message):
        assert config_errors("webhook", {"url": url}) == [message]

    def test_a_telegram_api_base_url_is_held_to_the_same_rules(self):
        errors = config_errors(
            "telegram",
            {
                "bot_token_env": "FAILOVER_SECRET_TELEGRAM_TOKEN",
                "chat_id": 42,
                "api_base_url": "http://[fd00:ec2::254]",
            },
        )
        assert errors == [
            "api_base_url: blocked by the URL policy: fd00:ec2::254 is a cloud metadata address "
            "(never allowed)."
        ]

    def test_a_name_resolving_to_a_private_address_is_refused_unless_allowed(
        self, local_dns, settings
    ):
        local_dns.add("hooks.corp.test", "192.168.10.20")
        settings.OUTBOUND_ALLOW = ["loopback"]
        assert config_errors("webhook", {"url": "https://hooks.corp.test/alerts"}) == [
            "url: blocked by the URL policy: hooks.corp.test resolves to 192.168.10.20, a "
            "private address (allowed only with OUTBOUND_ALLOW=private)."
        ]
        settings.OUTBOUND_ALLOW = ["private"]
        channel = AlertChannel(
            name="ops", kind="webhook", config={"url": "https://hooks.corp.test/alerts"}
        )
        channel.full_clean(validate_unique=False)

    def test_the_admin_form_shows_the_refusal(self, client, admin_user, settings):
        settings.OUTBOUND_ALLOW = []
        client.force_login(admin_user)
        url = reverse("admin:alerts_alertchannel_add")
        response = client.post(
            url,
            {
                "name": "ops-hook",
                "kind": "webhook",
                "config": json.dumps({"url": "http://localhost:9000/hook"}),
                "min_severity": "warning",
                "enabled": "on",
            },
        )
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["config"] == [
            "url: blocked by the URL policy: localhost resolves to 127.0.0.1, a loopback "
            "address (allowed only with OUTBOUND_ALLOW=loopback)."
        ]
        assert not AlertChannel.objects.exists()


class TestWhenSent:
    def test_a_metadata_url_saved_around_the_checks_is_refused_and_switches_the_channel_off(
        self, receiver, sleeps
    ):
        channel = _bypassing_checks(
            webhook_channel(receiver), url="http://169.254.169.254/latest/meta-data"
        )
        event = deliver_event(make_event().pk, sleep=sleeps)
        [result] = event.deliveries
        assert result["permanent"] and result["attempts"] == 1
        assert (
            "blocked by the URL policy: 169.254.169.254 is a cloud metadata address"
            in (result["error"])
        )
        channel.refresh_from_db()
        assert channel.enabled is False and sleeps == []

    def test_localhost_is_refused_when_loopback_is_not_allowed_and_nothing_arrives(
        self, receiver, settings, sleeps
    ):
        channel = webhook_channel(receiver)
        settings.OUTBOUND_ALLOW = []
        _bypassing_checks(channel, url=f"http://localhost:{receiver.port}/hook/ops")
        event = deliver_event(make_event().pk, sleep=sleeps)
        [result] = event.deliveries
        assert result["permanent"] and "localhost resolves to 127.0.0.1" in result["error"]
        assert receiver.messages == []

    def test_localhost_is_called_when_loopback_is_allowed(self, receiver, settings, sleeps):
        settings.OUTBOUND_ALLOW = ["loopback"]
        make_channel(kind="webhook", config={"url": f"http://localhost:{receiver.port}/hook/ops"})
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert event.status == "delivered"
        assert [m.path for m in receiver.messages] == ["/hook/ops"]

    def test_the_connection_judges_the_address_it_resolves_not_the_one_checked_before(
        self, receiver, local_dns, settings
    ):
        # The one call site, given a URL whose name now resolves inside: refused where it
        # connects, whatever any earlier check saw.
        local_dns.add("hooks.rebound.test", "127.0.0.1")
        settings.OUTBOUND_ALLOW = []
        channel = WebhookChannel({"url": "https://ops.example.com/hook"})
        with pytest.raises(TransportError) as caught:
            channel.post(f"http://hooks.rebound.test:{receiver.port}/hook/ops", content=b"{}")
        assert caught.value.permanent
        assert caught.value.message == (
            "Webhook was not called, blocked by the URL policy: hooks.rebound.test resolves to "
            "127.0.0.1, a loopback address (allowed only with OUTBOUND_ALLOW=loopback)."
        )
        assert receiver.messages == []
        settings.OUTBOUND_ALLOW = ["loopback"]
        channel = WebhookChannel({"url": "https://ops.example.com/hook"})
        response = channel.post(f"http://hooks.rebound.test:{receiver.port}/hook/ops", json={})
        assert response.status_code == 200 and len(receiver.messages) == 1

    def test_a_telegram_base_url_saved_around_the_checks_is_refused(self, receiver, sleeps):
        channel = _bypassing_checks(telegram_channel(receiver), api_base_url="http://[fe80::1]")
        event = send_test_alert(channel)
        [result] = event.deliveries
        assert result["permanent"] and "fe80::1 is a link-local address" in result["error"]
        assert receiver.messages == []

    def test_a_slack_url_in_the_environment_is_refused_when_read(self, monkeypatch, sleeps):
        slack_channel()  # saved while the variable held another URL (or none)
        monkeypatch.setenv(SLACK_URL_ENV, "http://metadata.google.internal/computeMetadata/v1")
        event = deliver_event(make_event().pk, sleep=sleeps)
        [result] = event.deliveries
        assert result["permanent"]
        assert result["error"] == (
            f"{SLACK_URL_ENV} holds a URL blocked by the URL policy: metadata.google.internal "
            "is a cloud metadata service (never allowed)."
        )

    def test_a_redirect_from_a_webhook_is_not_followed(self, receiver, sleeps):
        with RedirectServer(f"{receiver.url}/hook/ops") as redirecting:
            make_channel(kind="webhook", config={"url": f"{redirecting.url}/hook"})
            event = deliver_event(make_event().pk, sleep=sleeps)
            assert redirecting.requests == 1
        [result] = event.deliveries
        assert result["error"] == (
            "The webhook answered 302 Found (redirects are not followed: set the URL it points to)"
        )
        assert result["permanent"] and sleeps == []
        assert receiver.messages == []


class TestATestAlert:
    def test_a_failed_test_alert_shows_the_status_never_the_body(
        self, client, admin_user, receiver: FakeReceiver
    ):
        receiver.set_mode("error")  # answers 500 with {"error": "internal error"}
        channel = webhook_channel(receiver)
        client.force_login(admin_user)
        response = client.post(
            reverse("admin:alerts_alertchannel_send_test", args=[channel.pk]), follow=True
        )
        [message] = [str(m) for m in get_messages(response.wsgi_request)]
        assert message == (
            f"Test alert to {channel.name} failed: The webhook answered 500 Internal Server Error"
        )
        page = response.content.decode()
        channel.refresh_from_db()
        assert "internal error" not in page + channel.last_error
        assert len(receiver.messages) == 1
