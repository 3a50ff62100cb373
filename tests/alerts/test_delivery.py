"""Delivering an event: retries for what may pass, none for what won't, every outcome kept on the
event and the channel, and a second run of the same delivery never sends twice."""

from __future__ import annotations

import pytest
from django.utils import timezone

from alerts.delivery import deliver_event, send_test_alert
from alerts.models import AlertChannel
from tests.alerts.builders import (
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN_ENV,
    make_channel,
    make_event,
    slack_channel,
    telegram_channel,
    webhook_channel,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]


def fresh(channel: AlertChannel) -> AlertChannel:
    channel.refresh_from_db()
    return channel


class TestTelegram:
    def test_a_failover_reaches_the_chat_once_and_is_recorded_delivered(self, receiver, sleeps):
        channel = telegram_channel(receiver)
        event = deliver_event(make_event().pk, sleep=sleeps)
        [received] = receiver.messages
        assert "Failover: ollama-local is down" in received["text"]
        assert "traffic moved to openai-cloud" in received["text"]
        assert event.status == "delivered"
        [result] = event.deliveries
        assert result["channel"] == channel.name and result["channel_id"] == channel.pk
        assert (result["ok"], result["attempts"], result["error"]) == (True, 1, "")
        assert fresh(channel).last_sent_at is not None and channel.last_error == ""
        assert sleeps == []

    def test_a_401_switches_the_channel_off_with_the_error_after_one_attempt(
        self, receiver, sleeps
    ):
        receiver.set_mode("unauthorized")
        channel = telegram_channel(receiver)
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert len(receiver.messages) == 1
        assert sleeps == []
        assert event.status == "failed"
        [result] = event.deliveries
        assert (result["ok"], result["attempts"], result["permanent"]) == (False, 1, True)
        channel = fresh(channel)
        assert channel.enabled is False
        assert channel.disabled_reason.startswith("Telegram answered 401: Unauthorized")
        assert channel.last_error == channel.disabled_reason == result["error"]
        assert channel.disabled_at is not None and channel.last_error_at is not None
        assert TELEGRAM_TOKEN not in channel.disabled_reason

    def test_a_500_is_tried_three_times_with_backoff_then_recorded_failed(self, receiver, sleeps):
        receiver.set_mode("error")
        channel = telegram_channel(receiver)
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert [m.status for m in receiver.messages] == [500, 500, 500]
        assert sleeps == [0.5, 1.0]
        assert event.status == "failed"
        assert event.deliveries[0]["attempts"] == 3
        channel = fresh(channel)
        assert channel.enabled is True and channel.disabled_reason == ""
        assert channel.last_error == "Telegram answered 500: Internal Server Error"

    def test_a_429_then_ok_is_delivered_after_the_wait_telegram_asked_for(self, receiver, sleeps):
        receiver.set_mode("rate_limit", times=1, retry_after=2)
        telegram_channel(receiver)
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert [m.status for m in receiver.messages] == [429, 200]
        assert sleeps == [2.0]
        assert event.status == "delivered" and event.deliveries[0]["attempts"] == 2

    def test_a_long_retry_after_is_capped(self, receiver, sleeps):
        receiver.set_mode("rate_limit", times=1, retry_after=120)
        telegram_channel(receiver)
        assert deliver_event(make_event().pk, sleep=sleeps).status == "delivered"
        assert sleeps == [5.0]

    def test_a_missing_token_variable_switches_the_channel_off_naming_it(
        self, receiver, sleeps, monkeypatch
    ):
        monkeypatch.delenv(TELEGRAM_TOKEN_ENV)
        channel = telegram_channel(receiver)
        deliver_event(make_event().pk, sleep=sleeps)
        assert receiver.messages == []
        channel = fresh(channel)
        assert not channel.enabled and TELEGRAM_TOKEN_ENV in channel.disabled_reason


class TestWhichChannels:
    def test_a_channel_gets_only_events_at_or_above_its_minimum_severity(self, receiver, sleeps):
        for level in ("info", "warning", "critical"):
            make_channel(
                name=f"hook-{level}",
                config={"url": f"{receiver.url}/hook/{level}"},
                min_severity=level,
            )
        event = deliver_event(make_event(severity="warning").pk, sleep=sleeps)
        assert sorted(m.path for m in receiver.messages) == ["/hook/info", "/hook/warning"]
        assert sorted(d["channel"] for d in event.deliveries) == ["hook-info", "hook-warning"]
        assert event.status == "delivered"

    def test_a_switched_off_channel_gets_nothing(self, receiver, sleeps):
        webhook_channel(receiver, enabled=False)
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert receiver.messages == []
        assert (event.status, event.deliveries) == ("no_channel", [])

    def test_with_no_channel_the_event_is_kept_as_no_channel(self, sleeps):
        event = deliver_event(make_event().pk, sleep=sleeps)
        event.refresh_from_db()
        assert (event.status, event.deliveries) == ("no_channel", [])

    def test_one_channel_failing_does_not_stop_the_others(self, receiver, other_receiver, sleeps):
        receiver.set_mode("unauthorized")
        telegram_channel(receiver, name="a-telegram")
        webhook_channel(other_receiver, name="b-hook")
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert event.status == "partly_delivered"
        assert [(d["channel"], d["ok"]) for d in event.deliveries] == [
            ("a-telegram", False),
            ("b-hook", True),
        ]
        assert len(other_receiver.messages) == 1

    def test_each_kind_is_delivered_in_one_pass(self, receiver, sleeps, settings, mailoutbox):
        settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
        telegram_channel(receiver)
        slack_channel()
        webhook_channel(receiver)
        make_channel(kind="email", config={"to": ["ops@example.com"]})
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert event.status == "delivered" and len(event.deliveries) == 4
        assert sorted(m.path.split("/")[1] for m in receiver.messages) == [
            f"bot{TELEGRAM_TOKEN}",
            "hook",
            "slack",
        ]
        assert len(mailoutbox) == 1

    def test_a_suppressed_event_is_not_sent(self, receiver, sleeps):
        webhook_channel(receiver)
        event = make_event(status="suppressed", suppressed_reason="cooldown")
        assert deliver_event(event.pk, sleep=sleeps).status == "suppressed"
        assert receiver.messages == []


class TestRunningTwice:
    def test_a_second_run_sends_only_to_the_channels_that_failed(
        self, receiver, other_receiver, sleeps
    ):
        webhook_channel(receiver, name="a-ok")
        other_receiver.set_mode("error")
        webhook_channel(other_receiver, name="b-flaky")
        event = deliver_event(make_event().pk, sleep=sleeps)
        assert event.status == "partly_delivered"
        other_receiver.set_mode("ok")
        event = deliver_event(event.pk, sleep=sleeps)
        assert event.status == "delivered"
        assert len(receiver.messages) == 1
        assert [m.status for m in other_receiver.messages] == [500, 500, 500, 200]
        assert [(d["channel"], d["ok"]) for d in event.deliveries] == [
            ("a-ok", True),
            ("b-flaky", True),
        ]

    def test_a_run_after_a_crash_skips_the_channel_already_delivered(
        self, receiver, other_receiver, sleeps
    ):
        done = webhook_channel(receiver, name="a-done")
        webhook_channel(other_receiver, name="b-pending")
        # The worker died after the first channel's result was saved, before the second.
        event = make_event(
            deliveries=[
                {
                    "channel": "a-done",
                    "channel_id": done.pk,
                    "ok": True,
                    "attempts": 1,
                    "error": "",
                    "at": timezone.now().isoformat(),
                }
            ]
        )
        event = deliver_event(event.pk, sleep=sleeps)
        assert receiver.messages == []
        assert len(other_receiver.messages) == 1
        assert event.status == "delivered" and len(event.deliveries) == 2

    def test_a_delivered_event_is_not_sent_again(self, receiver, sleeps):
        webhook_channel(receiver)
        event = deliver_event(make_event().pk, sleep=sleeps)
        webhook_channel(receiver, name="added-later")
        again = deliver_event(event.pk, sleep=sleeps)
        assert len(receiver.messages) == 1
        assert again.status == "delivered" and again.deliveries == event.deliveries


class TestTestAlert:
    def test_it_goes_to_that_channel_only_and_is_kept_as_a_test_event(
        self, receiver, other_receiver
    ):
        channel = telegram_channel(receiver)
        webhook_channel(other_receiver)
        event = send_test_alert(channel, requested_by="admin")
        assert (event.kind, event.severity, event.status) == ("test", "info", "delivered")
        assert event.key == f"test:{channel.pk}"
        assert "works" in receiver.messages[0]["text"]
        assert other_receiver.messages == []

    def test_it_is_tried_once_without_retries(self, receiver):
        receiver.set_mode("error")
        channel = telegram_channel(receiver)
        event = send_test_alert(channel)
        assert len(receiver.messages) == 1
        assert event.status == "failed" and fresh(channel).enabled

    def test_it_reaches_a_switched_off_channel_or_one_above_info(self, receiver):
        channel = webhook_channel(receiver, enabled=False, min_severity="critical")
        assert send_test_alert(channel).status == "delivered"
        assert fresh(channel).enabled is False  # switching it on stays the operator's choice
