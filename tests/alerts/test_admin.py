"""The alert pages of the admin: channels edited with their config checked and every change on
record, a test alert from the list or the channel's page, and events read-only."""

from __future__ import annotations

import json

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from alerts.models import AlertChannel, AlertEvent
from providers.models import ConfigChange
from tests.admin_forms import change_form_data
from tests.alerts.builders import (
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN_ENV,
    make_event,
    telegram_channel,
    webhook_channel,
)
from tests.factories import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]


@pytest.fixture
def operator(client, admin_user):
    client.force_login(admin_user)
    return admin_user


def change_url(channel: AlertChannel) -> str:
    return reverse("admin:alerts_alertchannel_change", args=[channel.pk])


def button_url(channel: AlertChannel) -> str:
    return reverse("admin:alerts_alertchannel_send_test", args=[channel.pk])


def texts(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


class TestChannels:
    def test_the_list_shows_kind_state_and_errors(self, client, operator, receiver):
        channel = telegram_channel(receiver)
        AlertChannel.objects.filter(pk=channel.pk).update(
            enabled=False,
            last_error="Telegram answered 401: Unauthorized",
            disabled_reason="Telegram answered 401: Unauthorized",
        )
        page = client.get(reverse("admin:alerts_alertchannel_changelist")).content.decode()
        assert channel.name in page and "Telegram" in page
        assert page.count("Telegram answered 401: Unauthorized") == 2

    def test_the_page_names_the_token_variable_but_never_shows_the_token(
        self, client, operator, receiver
    ):
        channel = telegram_channel(receiver)
        page = client.get(change_url(channel)).content.decode()
        listing = client.get(reverse("admin:alerts_alertchannel_changelist")).content.decode()
        assert f"{TELEGRAM_TOKEN_ENV} is set" in page
        assert TELEGRAM_TOKEN not in page + listing

    def test_adding_a_channel_is_recorded_with_its_config(self, client, operator, receiver):
        url = reverse("admin:alerts_alertchannel_add")
        config = {"url": f"{receiver.url}/hook/ops"}
        data = change_form_data(
            client, url, name="ops-hook", kind="webhook", config=json.dumps(config)
        )
        assert client.post(url, data).status_code == 302
        channel = AlertChannel.objects.get(name="ops-hook")
        assert channel.config["header"] == "X-Failover-Signature"  # the default, filled in
        change = ConfigChange.objects.get(action="create")
        assert change.target_type == "alerts.alertchannel"
        assert change.after["config"] == channel.config

    def test_a_pasted_token_is_refused_with_the_reason_and_nothing_is_saved(self, client, operator):
        url = reverse("admin:alerts_alertchannel_add")
        config = {"bot_token_env": TELEGRAM_TOKEN, "chat_id": 42}
        data = change_form_data(
            client, url, name="ops-tg", kind="telegram", config=json.dumps(config)
        )
        response = client.post(url, data)
        assert response.status_code == 200
        assert "not the bot token itself" in response.content.decode()
        assert not AlertChannel.objects.exists() and not ConfigChange.objects.exists()

    def test_config_that_is_not_json_is_refused(self, client, operator):
        url = reverse("admin:alerts_alertchannel_add")
        data = change_form_data(client, url, name="x", kind="webhook", config="{url: nope")
        response = client.post(url, data)
        assert response.status_code == 200
        assert "Enter a valid JSON." in response.content.decode()

    def test_switching_a_channel_back_on_clears_why_it_was_off(self, client, operator, receiver):
        channel = webhook_channel(receiver)
        AlertChannel.objects.filter(pk=channel.pk).update(
            enabled=False, disabled_reason="The webhook answered 401", last_error="401"
        )
        url = change_url(channel)
        data = change_form_data(client, url, enabled=True, config=json.dumps(channel.config))
        assert client.post(url, data).status_code == 302
        channel.refresh_from_db()
        assert (channel.enabled, channel.disabled_reason, channel.disabled_at) == (True, "", None)
        assert channel.last_error == "401"  # the history stays
        change = ConfigChange.objects.get()
        assert change.before["enabled"] is False and change.after["enabled"] is True


class TestSendTestAlert:
    def test_the_button_sends_one_and_reports_success(self, client, operator, receiver):
        channel = telegram_channel(receiver)
        page = client.get(change_url(channel)).content.decode()
        assert button_url(channel) in page and "Send a test alert" in page
        response = client.post(button_url(channel))
        assert response.status_code == 302 and response["Location"] == change_url(channel)
        assert texts(response) == [f"Test alert sent to {channel.name}."]
        assert len(receiver.messages) == 1
        event = AlertEvent.objects.get()
        assert event.kind == "test" and event.data["requested_by"] == operator.username

    def test_the_button_reports_a_permanent_error_and_the_channel_is_switched_off(
        self, client, operator, receiver
    ):
        receiver.set_mode("unauthorized")
        channel = telegram_channel(receiver)
        response = client.post(button_url(channel), follow=True)
        [message] = texts(response)
        assert message.startswith(
            f"Test alert to {channel.name} failed: Telegram answered 401: Unauthorized"
        )
        assert "switched off" in message
        assert "switched off" in response.content.decode()
        channel.refresh_from_db()
        assert channel.enabled is False

    def test_the_button_does_nothing_on_a_get(self, client, operator, receiver):
        channel = telegram_channel(receiver)
        assert client.get(button_url(channel)).status_code == 405
        assert receiver.messages == []

    def test_staff_who_may_only_view_cannot_send(self, client, receiver):
        client.force_login(make_user(perms=("alerts.view_alertchannel",)))
        channel = telegram_channel(receiver)
        assert "Send a test alert" not in client.get(change_url(channel)).content.decode()
        assert client.post(button_url(channel)).status_code == 403
        assert receiver.messages == []

    def test_the_list_action_sends_to_each_selected_channel(
        self, client, operator, receiver, other_receiver
    ):
        first = webhook_channel(receiver, name="a-hook")
        other_receiver.set_mode("error")
        second = webhook_channel(other_receiver, name="b-hook")
        response = client.post(
            reverse("admin:alerts_alertchannel_changelist"),
            {"action": "send_test_alerts", "_selected_action": [first.pk, second.pk]},
        )
        assert response.status_code == 302
        assert texts(response) == [
            "Test alert sent to a-hook.",
            "Test alert to b-hook failed: The webhook answered 500 Internal Server Error",
        ]
        assert len(receiver.messages) == 1 and len(other_receiver.messages) == 1


class TestEvents:
    def test_the_list_filters_by_kind_severity_and_status(self, client, operator):
        make_event(title="Primary down")
        make_event(kind="budget", severity="warning", title="Budget at 85 %", status="suppressed")
        url = reverse("admin:alerts_alertevent_changelist")
        page = client.get(url).content.decode()
        assert "Primary down" in page and "Budget at 85 %" in page
        for query in ("kind__exact=budget", "severity__exact=warning", "status__exact=suppressed"):
            filtered = client.get(f"{url}?{query}").content.decode()
            assert "Budget at 85 %" in filtered and "Primary down" not in filtered

    def test_the_page_shows_each_delivery_readably_and_cannot_be_changed(self, client, operator):
        event = make_event(
            status="partly_delivered",
            deliveries=[
                {
                    "channel": "ops-telegram",
                    "kind": "telegram",
                    "ok": True,
                    "attempts": 1,
                    "error": "",
                    "at": "2025-01-01T00:00:00+00:00",
                },
                {
                    "channel": "ops-hook",
                    "kind": "webhook",
                    "ok": False,
                    "attempts": 3,
                    "error": "The webhook answered 500",
                    "at": "2025-01-01T00:00:01+00:00",
                },
            ],
        )
        url = reverse("admin:alerts_alertevent_change", args=[event.pk])
        response = client.get(url)
        page = response.content.decode()
        assert '<table class="alert-deliveries">' in page
        assert "ops-hook" in page and "The webhook answered 500" in page
        assert 'name="_save"' not in page
        assert client.post(url, {"title": "changed"}).status_code == 403
        event.refresh_from_db()
        assert event.title == "Failover: ollama-local is down"

    def test_events_cannot_be_added_or_deleted(self, client, operator):
        event = make_event()
        assert client.get(reverse("admin:alerts_alertevent_add")).status_code == 403
        delete = reverse("admin:alerts_alertevent_delete", args=[event.pk])
        assert client.post(delete, {"post": "yes"}).status_code == 403
        assert AlertEvent.objects.count() == 1
