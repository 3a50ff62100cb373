"""Small builders for the alert tests: valid by default, any field overridable."""

from __future__ import annotations

import itertools
from typing import Any

from alerts.models import AlertChannel, AlertEvent
from devtools.fake_receiver import FakeReceiver

# Secrets the tests put in the environment, as an operator would.
TELEGRAM_TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
TELEGRAM_TOKEN_ENV = "FAILOVER_SECRET_TEST_TELEGRAM_TOKEN"
SLACK_URL_ENV = "FAILOVER_SECRET_TEST_SLACK_WEBHOOK_URL"
WEBHOOK_SECRET = "a-shared-hmac-secret"
WEBHOOK_SECRET_ENV = "FAILOVER_SECRET_TEST_WEBHOOK_SECRET"

_sequence = itertools.count(1)


def make_channel(**overrides: Any) -> AlertChannel:
    n = next(_sequence)
    values: dict[str, Any] = {
        "name": f"channel-{n}",
        "kind": "webhook",
        "config": {"url": f"http://127.0.0.1:9/hook/{n}"},
        "min_severity": "info",
    }
    values.update(overrides)
    channel = AlertChannel(**values)
    channel.full_clean()
    channel.save()
    return channel


def telegram_channel(receiver: FakeReceiver, **overrides: Any) -> AlertChannel:
    config = {
        "bot_token_env": TELEGRAM_TOKEN_ENV,
        "chat_id": -1001234567890,
        "api_base_url": receiver.telegram_base_url,
    }
    return make_channel(kind="telegram", config=config, **overrides)


def slack_channel(**overrides: Any) -> AlertChannel:
    return make_channel(kind="slack", config={"webhook_url_env": SLACK_URL_ENV}, **overrides)


def webhook_channel(receiver: FakeReceiver, *, signed: bool = True, **overrides: Any):
    config: dict[str, Any] = {"url": f"{receiver.url}/hook/ops"}
    if signed:
        config["secret_env"] = WEBHOOK_SECRET_ENV
    return make_channel(kind="webhook", config=config, **overrides)


def make_event(**overrides: Any) -> AlertEvent:
    values: dict[str, Any] = {
        "kind": "failover",
        "severity": "critical",
        "key": "failover:ollama-local",
        "title": "Failover: ollama-local is down",
        "message": "Breaker opened after 3 timeouts; traffic moved to openai-cloud.",
        "data": {"provider": "ollama-local", "to": "openai-cloud"},
    }
    values.update(overrides)
    return AlertEvent.objects.create(**values)
