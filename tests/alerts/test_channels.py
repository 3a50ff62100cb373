"""Each channel against a receiver that answers as the real service does, over loopback HTTP:
what it sends, and how it classifies each answer (permanent: don't retry, switch off)."""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
import pytest
from django.core import mail

from alerts.channels import TransportError, channel_for
from alerts.channels.telegram import TelegramAnswer
from devtools.fake_receiver import FakeReceiver
from tests.alerts.builders import (
    SLACK_URL_ENV,
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN_ENV,
    WEBHOOK_SECRET,
    make_channel,
    make_event,
    slack_channel,
    telegram_channel,
    webhook_channel,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]


def send_error(channel, event) -> TransportError:
    with pytest.raises(TransportError) as caught:
        channel_for(channel).send(event.as_alert())
    return caught.value


class TestTelegram:
    def test_it_sends_the_title_in_bold_and_the_message_in_html_mode_to_the_chat(self, receiver):
        event = make_event()
        channel_for(telegram_channel(receiver)).send(event.as_alert())
        [received] = receiver.messages
        assert received.path == f"/bot{TELEGRAM_TOKEN}/sendMessage"
        assert received["chat_id"] == -1001234567890
        assert received["parse_mode"] == "HTML"
        assert received["text"] == (
            "<b>[CRITICAL] Failover: ollama-local is down</b>\n\n"
            "Breaker opened after 3 timeouts; traffic moved to openai-cloud."
        )
        assert received["link_preview_options"] == {"is_disabled": True}
        assert received.status == 200

    def test_a_401_is_permanent_and_the_token_stays_out_of_the_message(self, receiver):
        receiver.set_mode("unauthorized")
        error = send_error(telegram_channel(receiver), make_event())
        assert error.permanent
        assert error.message.startswith("Telegram answered 401: Unauthorized")
        assert TELEGRAM_TOKEN not in error.message

    def test_a_500_is_transient(self, receiver):
        receiver.set_mode("error")
        error = send_error(telegram_channel(receiver), make_event())
        assert not error.permanent
        assert error.message == "Telegram answered 500: Internal Server Error"

    def test_a_429_is_transient_and_carries_telegrams_retry_after(self, receiver):
        receiver.set_mode("rate_limit", retry_after=3)
        error = send_error(telegram_channel(receiver), make_event())
        assert (error.permanent, error.retry_after) == (False, 3.0)

    def test_a_token_telegram_does_not_know_is_permanent(self):
        with FakeReceiver(telegram_token="987:other-token") as strict:
            error = send_error(telegram_channel(strict), make_event())
        assert error.permanent and "401" in error.message

    def test_an_unreachable_server_is_transient_and_the_token_stays_out(self, closed_port):
        channel = make_channel(
            kind="telegram",
            config={
                "bot_token_env": TELEGRAM_TOKEN_ENV,
                "chat_id": 1,
                "api_base_url": f"http://127.0.0.1:{closed_port}",
            },
        )
        error = send_error(channel, make_event())
        assert not error.permanent
        assert error.message.startswith("Could not reach Telegram")
        assert TELEGRAM_TOKEN not in error.message

    def test_a_hanging_server_times_out_as_a_transient_error(self, receiver, monkeypatch):
        monkeypatch.setattr("alerts.channels.base.TIMEOUT", httpx.Timeout(0.3))
        receiver.set_mode("hang")
        error = send_error(telegram_channel(receiver), make_event())
        assert not error.permanent
        assert error.message == "Telegram did not answer in time (ReadTimeout)."

    def test_a_missing_token_variable_is_permanent_and_names_the_variable(
        self, receiver, monkeypatch
    ):
        monkeypatch.delenv(TELEGRAM_TOKEN_ENV)
        error = send_error(telegram_channel(receiver), make_event())
        assert error.permanent
        assert error.message == (
            f"{TELEGRAM_TOKEN_ENV} (the Telegram bot token) is not set in this process's "
            "environment."
        )
        assert receiver.messages == []

    def test_a_group_turned_supergroup_is_read_with_its_new_chat_id(self):
        answer = TelegramAnswer.parse(
            {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: group chat was upgraded to a supergroup chat",
                "parameters": {"migrate_to_chat_id": -1009876543210},
            },
            400,
        )
        assert (answer.ok, answer.error_code, answer.migrate_to_chat_id) == (
            False,
            400,
            -1009876543210,
        )

    def test_an_answer_that_is_not_json_is_read_by_its_status(self):
        answer = TelegramAnswer.parse(None, 502)
        assert (answer.ok, answer.error_code, answer.description) == (False, 502, "HTTP 502")


class TestSlack:
    def test_it_posts_the_text_to_the_webhook(self, receiver):
        channel_for(slack_channel()).send(
            make_event(severity="warning", title="Budget at 85 %").as_alert()
        )
        [received] = receiver.messages
        assert received.path == "/slack/T000/B000/XXXX"
        assert received["text"].startswith("[WARNING] Budget at 85 %\n\n")

    def test_slacks_markup_characters_are_escaped(self, receiver):
        channel_for(slack_channel()).send(make_event(title="p95 > 5 s & <rising>").as_alert())
        assert receiver.messages[0]["text"].startswith(
            "[CRITICAL] p95 &gt; 5 s &amp; &lt;rising&gt;\n\n"
        )

    def test_invalid_token_is_permanent(self, receiver):
        receiver.set_mode("unauthorized")
        error = send_error(slack_channel(), make_event())
        assert error.permanent and error.message == "Slack answered 403: invalid_token"

    @pytest.mark.parametrize(("mode", "status"), [("error", 500), ("rate_limit", 429)])
    def test_server_errors_and_rate_limits_are_transient(self, receiver, mode, status):
        receiver.set_mode(mode, retry_after=2)
        error = send_error(slack_channel(), make_event())
        assert not error.permanent and error.message.startswith(f"Slack answered {status}")
        assert error.retry_after == (2.0 if status == 429 else None)

    def test_the_webhook_url_stays_out_of_error_messages(self, monkeypatch, closed_port):
        url = f"http://127.0.0.1:{closed_port}/slack/T000/B000/SECRETPART"
        monkeypatch.setenv(SLACK_URL_ENV, url)
        error = send_error(slack_channel(), make_event())
        assert "SECRETPART" not in error.message and not error.permanent


class TestWebhook:
    def test_it_posts_the_event_as_json_signed_over_the_exact_body(self, receiver):
        event = make_event()
        channel_for(webhook_channel(receiver)).send(event.as_alert())
        [received] = receiver.messages
        assert received.path == "/hook/ops"
        expected = hmac.new(WEBHOOK_SECRET.encode(), received.body, hashlib.sha256).hexdigest()
        assert received.headers["x-failover-signature"] == f"sha256={expected}"
        assert json.loads(received.body) == {
            "id": event.pk,
            "kind": "failover",
            "severity": "critical",
            "key": "failover:ollama-local",
            "title": "Failover: ollama-local is down",
            "message": "Breaker opened after 3 timeouts; traffic moved to openai-cloud.",
            "data": {"provider": "ollama-local", "to": "openai-cloud"},
            "created_at": event.created_at.isoformat(),
        }

    def test_a_receiver_checking_the_signature_accepts_it(self):
        with FakeReceiver(hook_secret=WEBHOOK_SECRET, hook_header="X-Sig") as strict:
            channel = webhook_channel(strict)
            channel.config["header"] = "X-Sig"
            channel_for(channel).send(make_event().as_alert())
            assert [m.status for m in strict.messages] == [200]

    def test_without_a_secret_there_is_no_signature(self, receiver):
        channel_for(webhook_channel(receiver, signed=False)).send(make_event().as_alert())
        assert "x-failover-signature" not in receiver.messages[0].headers

    @pytest.mark.parametrize(
        ("mode", "permanent"), [("unauthorized", True), ("error", False), ("rate_limit", False)]
    )
    def test_4xx_is_permanent_but_429_and_5xx_are_not(self, receiver, mode, permanent):
        receiver.set_mode(mode)
        assert send_error(webhook_channel(receiver), make_event()).permanent is permanent


class TestEmail:
    @pytest.fixture(autouse=True)
    def _locmem(self, settings):
        settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
        settings.DEFAULT_FROM_EMAIL = "gateway@example.com"

    def test_it_mails_every_address_with_the_severity_in_the_subject(self):
        channel = make_channel(kind="email", config={"to": ["ops@example.com", "me@example.com"]})
        channel_for(channel).send(make_event().as_alert())
        [message] = mail.outbox
        assert message.subject == "[CRITICAL] Failover: ollama-local is down"
        assert message.to == ["ops@example.com", "me@example.com"]
        assert message.from_email == "gateway@example.com"
        assert "traffic moved to openai-cloud" in message.body

    def test_a_title_with_a_line_break_still_makes_one_subject_line(self):
        channel = make_channel(kind="email", config={"to": ["ops@example.com"]})
        channel_for(channel).send(make_event(title="Two\nlines").as_alert())
        assert mail.outbox[0].subject == "[CRITICAL] Two lines"

    @pytest.mark.parametrize(
        ("backend", "permanent"),
        [
            ("RecipientsRefused", True),
            ("AuthenticationFailed", True),
            ("ServerDisconnected", False),
            ("TimedOut", False),
            ("Greylisted", False),
        ],
    )
    def test_smtp_errors_are_classified(self, settings, backend, permanent):
        settings.EMAIL_BACKEND = f"tests.alerts.mail_backends.{backend}"
        channel = make_channel(kind="email", config={"to": ["ops@example.com"]})
        assert send_error(channel, make_event()).permanent is permanent


def test_a_config_broken_behind_the_forms_back_is_a_permanent_error():
    channel = make_channel(kind="webhook", config={"url": "http://127.0.0.1:9/hook"})
    channel.config = {"url": "gopher://old"}
    error = send_error(channel, make_event())
    assert error.permanent
    assert error.message.startswith("The channel's configuration is invalid: url:")
