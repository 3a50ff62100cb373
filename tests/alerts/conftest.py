"""Alert fixtures: a fake Telegram / Slack / webhook receiver over loopback, a recorded
`sleep`, and a guard that fails any test whose channel would reach past loopback."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from devtools.fake_receiver import FakeReceiver
from tests.alerts.builders import (
    SLACK_URL_ENV,
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN_ENV,
    WEBHOOK_SECRET,
    WEBHOOK_SECRET_ENV,
)
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures, for end-to-end tests
    api,
    clock,
    gateway,
    primary,
    providers_configured,
    secondary,
)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in these tests may reach the internet (api.telegram.org is the default base)."""
    real = httpx.HTTPTransport.handle_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        assert request.url.host in ("127.0.0.1", "localhost"), f"not loopback: {request.url}"
        return real(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle_request)


@pytest.fixture
def receiver() -> Iterator[FakeReceiver]:
    with FakeReceiver() as fake:
        yield fake


@pytest.fixture
def other_receiver() -> Iterator[FakeReceiver]:
    with FakeReceiver() as fake:
        yield fake


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch, receiver: FakeReceiver) -> None:
    monkeypatch.setenv(TELEGRAM_TOKEN_ENV, TELEGRAM_TOKEN)
    monkeypatch.setenv(SLACK_URL_ENV, f"{receiver.url}/slack/T000/B000/XXXX")
    monkeypatch.setenv(WEBHOOK_SECRET_ENV, WEBHOOK_SECRET)


class Sleeps(list[float]):
    """Stands in for time.sleep: records each wait instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()
