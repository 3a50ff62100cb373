"""Each kind's config is checked when a channel is saved through a form, and every problem is
reported on the config field in words an operator can act on."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from alerts.models import AlertChannel
from tests.alerts.builders import TELEGRAM_TOKEN


def config_errors(kind: str, config: Any) -> list[str]:
    channel = AlertChannel(name="ops", kind=kind, config=config)
    with pytest.raises(ValidationError) as caught:
        channel.full_clean(validate_unique=False)
    return caught.value.message_dict["config"]


def cleaned(kind: str, config: Any) -> dict[str, Any]:
    channel = AlertChannel(name="ops", kind=kind, config=config)
    channel.full_clean(validate_unique=False)
    return channel.config


class TestTelegram:
    def test_a_missing_chat_id_is_refused(self):
        errors = config_errors("telegram", {"bot_token_env": "TELEGRAM_BOT_TOKEN"})
        assert errors == ["chat_id: is required: the chat's numeric id or a channel's @username."]

    def test_a_token_pasted_instead_of_a_variable_name_is_refused(self):
        errors = config_errors("telegram", {"bot_token_env": TELEGRAM_TOKEN, "chat_id": 42})
        assert len(errors) == 1
        assert errors[0].startswith("bot_token_env: enter the name of the environment variable")
        assert "not the bot token itself" in errors[0]

    def test_a_base_url_that_is_not_http_is_refused(self):
        config = {
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_id": 42,
            "api_base_url": "ftp://tg.example",
        }
        assert config_errors("telegram", config) == [
            "api_base_url: enter an http:// or https:// URL (not 'ftp://tg.example')."
        ]

    def test_a_chat_id_that_is_neither_a_number_nor_a_username_is_refused(self):
        errors = config_errors(
            "telegram", {"bot_token_env": "TELEGRAM_BOT_TOKEN", "chat_id": "ops chat"}
        )
        assert errors == ["chat_id: 'ops chat' is neither a numeric chat id nor an @username."]

    def test_the_defaults_are_filled_in_and_a_numeric_chat_id_becomes_a_number(self):
        config = cleaned("telegram", {"bot_token_env": "TELEGRAM_BOT_TOKEN", "chat_id": "-100123"})
        assert config == {
            "bot_token_env": "TELEGRAM_BOT_TOKEN",
            "chat_id": -100123,
            "api_base_url": "https://api.telegram.org",
        }

    def test_a_channel_username_is_kept_as_it_is(self):
        config = cleaned(
            "telegram", {"bot_token_env": "TELEGRAM_BOT_TOKEN", "chat_id": "@ops_alerts"}
        )
        assert config["chat_id"] == "@ops_alerts"


class TestSlack:
    def test_a_webhook_url_pasted_instead_of_a_variable_name_is_refused(self):
        errors = config_errors(
            "slack", {"webhook_url_env": "https://hooks.slack.com/services/T0/B0/XXXX"}
        )
        assert len(errors) == 1
        assert "not the webhook URL itself" in errors[0]

    def test_the_variable_is_required(self):
        assert config_errors("slack", {}) == ["webhook_url_env: is required."]


class TestEmail:
    def test_the_addresses_are_required(self):
        assert config_errors("email", {"to": []}) == [
            'to: is required: a list of addresses, e.g. ["ops@example.com"].'
        ]

    def test_a_bad_address_is_named(self):
        errors = config_errors("email", {"to": ["ops@example.com", "oncall at example"]})
        assert errors == ["to: not an e-mail address: 'oncall at example'."]

    def test_one_address_as_a_string_is_refused_with_the_expected_shape(self):
        errors = config_errors("email", {"to": "ops@example.com"})
        assert errors == ['to: must be a list of addresses, e.g. ["ops@example.com"].']


class TestWebhook:
    def test_a_bad_url_is_refused(self):
        assert config_errors("webhook", {"url": "not a url"}) == [
            "url: enter an http:// or https:// URL (not 'not a url')."
        ]

    def test_a_secret_pasted_instead_of_a_variable_name_is_refused(self):
        errors = config_errors(
            "webhook", {"url": "https://ops.example/hook", "secret_env": "s3cr3t!"}
        )
        assert len(errors) == 1 and "not the HMAC key itself" in errors[0]

    def test_a_header_that_is_not_a_header_name_is_refused(self):
        errors = config_errors("webhook", {"url": "https://ops.example/hook", "header": "X Sig:"})
        assert errors == ["header: 'X Sig:' is not an HTTP header name (letters, digits, '-')."]

    def test_the_signature_header_defaults(self):
        assert cleaned("webhook", {"url": "https://ops.example/hook"}) == {
            "url": "https://ops.example/hook",
            "secret_env": "",
            "header": "X-Failover-Signature",
        }


def test_an_unknown_key_is_named_with_the_keys_the_kind_takes():
    errors = config_errors("slack", {"webhook_url_env": "SLACK_WEBHOOK_URL", "channel": "#ops"})
    assert errors == ["Unknown key(s): channel (this kind takes webhook_url_env)."]


def test_every_problem_is_reported_at_once():
    errors = config_errors("telegram", {"bot_token_env": "my token", "api_base_url": "nope"})
    assert [error.split(":")[0] for error in errors] == ["bot_token_env", "chat_id", "api_base_url"]


def test_a_config_that_is_not_an_object_is_refused():
    errors = config_errors("email", ["ops@example.com"])
    assert errors == ['The config must be a JSON object, e.g. {"to": …}.']
