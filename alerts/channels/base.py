"""The one contract every alert channel keeps, and the one HTTP call site the HTTP channels share.

`send(alert)` takes a plain `Alert` value (an `AlertEvent` row gives one: `as_alert()`, so the
channels know no model) and returns when the channel took it and raises `TransportError` when it
didn't: `permanent=True` when sending again cannot help (a revoked token, a chat that is gone, a
refused recipient), so delivery disables the channel instead of retrying; otherwise the error is
transient and delivery retries a bounded number of times, waiting `retry_after` when the other
side asked for it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

import httpx
from django.core.exceptions import ValidationError

from alerts.channels.outbound import policy_transport
from providers.models import http_url_validator
from providers.models.outbound import BLOCKED, REFUSED_CODE, OutboundRefused
from providers.models.secret_env import (
    ENV_VAR_NAME,
    secret_destination_problem,
    secret_env_problem,
    secret_env_read,
    secrets_scrubbed,
)


@dataclass(frozen=True)
class Alert:
    """One alert as a channel sends it: what an `AlertEvent` row holds, without the row."""

    id: int | None
    created_at: datetime
    kind: str
    severity: str
    key: str
    title: str
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


class ChannelSpec(Protocol):
    """What a channel is built from: a kind and its config (an `AlertChannel` row is one)."""

    @property
    def kind(self) -> str: ...

    @property
    def config(self) -> Any: ...


# Per send: an alert is small, and a channel that takes longer is treated as down. Delivery
# runs in the background, but a hanging channel must still not hold the worker for long.
TIMEOUT = httpx.Timeout(5.0, connect=3.0)

# Telegram caps a message at 4096 characters; the other channels take more, but an alert that
# long is a bug, and a short one reads better on a phone.
MAX_TEXT = 4000


class TransportError(Exception):
    """A channel could not take an event. `permanent`: sending again won't help."""

    def __init__(
        self, message: str, *, permanent: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class Channel(ABC):
    """One alert channel, built from an `AlertChannel` row's kind and config."""

    kind: ClassVar[str]
    label: ClassVar[str]
    # Shown under the config field in the admin: the keys this kind takes.
    config_help: ClassVar[str]

    def __init__(self, config: Mapping[str, Any]) -> None:
        try:
            self.config = self.clean_config(config)
        except ValidationError as exc:
            raise TransportError(
                "The channel's configuration is invalid: " + " ".join(exc.messages),
                permanent=True,
            ) from exc

    @classmethod
    @abstractmethod
    def clean_config(cls, config: Any) -> dict[str, Any]:
        """The config with its defaults filled in; `ValidationError` listing every problem."""

    @abstractmethod
    def send(self, alert: Alert) -> None:
        """Hand the alert over; raises `TransportError` when the channel didn't take it."""


class ConfigErrors:
    """Collects a config's problems, one message per key, for one `ValidationError`."""

    def __init__(self, config: Any, *, allowed: tuple[str, ...]) -> None:
        self.messages: list[str] = []
        if not isinstance(config, dict):
            example = ", ".join(f'"{key}": …' for key in allowed)
            raise ValidationError(f"The config must be a JSON object, e.g. {{{example}}}.")
        self.config: dict[str, Any] = config
        unknown = sorted(set(config) - set(allowed))
        if unknown:
            self.messages.append(
                f"Unknown key(s): {', '.join(unknown)} (this kind takes {', '.join(allowed)})."
            )

    def add(self, key: str, message: str) -> None:
        self.messages.append(f"{key}: {message}")

    def string(self, key: str, *, required: bool, default: str = "") -> str:
        value = self.config.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            self.add(key, "must be a string.")
            return default
        value = value.strip()
        if required and not value:
            self.add(key, "is required.")
        return value

    def env_var(self, key: str, *, required: bool, example: str, holds: str) -> str:
        value = self.string(key, required=required)
        if value and not ENV_VAR_NAME.fullmatch(value):
            self.add(
                key,
                f"enter the name of the environment variable holding {holds} (capitals, digits "
                f"and underscores, e.g. {example}), not {holds} itself: secrets never enter the "
                "database.",
            )
        elif value:
            problem = secret_env_problem(value)
            if problem:
                self.add(key, problem)
        return value

    def bound(self, key: str, name: str, url: str) -> None:
        """The secret in `name` (the config's `key`) goes to `url`: only where it may go."""
        problem = secret_destination_problem(name, url) if name and not self.messages else ""
        if problem:
            self.add(key, problem)

    def http_url(self, key: str, *, required: bool, default: str = "") -> str:
        value = self.string(key, required=required, default=default)
        if value:
            try:
                http_url_validator(value)
            except ValidationError as exc:
                if exc.code == REFUSED_CODE and exc.params:
                    self.add(key, f"{BLOCKED}: {exc.params['refusal']}.")
                else:
                    self.add(key, f"enter an http:// or https:// URL (not {value!r}).")
        return value

    def raise_if_any(self) -> None:
        if self.messages:
            raise ValidationError(self.messages)


def env_secret(name: str, what: str) -> str:
    """The value of the environment variable `name`; a permanent error when it isn't set or the
    secret-variable rule refuses the name (read as not set, whatever it holds), since no retry
    changes that (the operator fixes the config or the environment, then re-enables it)."""
    problem = secret_env_problem(name)
    if problem:
        raise TransportError(f"The {what} can't be read: {problem}", permanent=True)
    value, _ = secret_env_read(name)
    if not value:
        raise TransportError(
            f"{name} (the {what}) is not set in this process's environment.", permanent=True
        )
    return value


def runbook_of(event: Alert) -> list[str]:
    """The provider's runbook lines the alert quotes (`data["runbook"]`), if any."""
    data = event.data if isinstance(event.data, dict) else {}
    lines = data.get("runbook")
    return [str(line) for line in lines] if isinstance(lines, list) else []


def event_body(event: Alert) -> str:
    """The plain-text alert's body: the message, then the runbook's lines."""
    text = event.message
    runbook = runbook_of(event)
    if runbook:
        text += "\n\nRunbook:\n" + "\n".join(f"  {line}" for line in runbook)
    return text.strip()


def event_text(event: Alert) -> str:
    """The plain-text alert: severity and title on the first line, the body below."""
    text = f"[{event.severity.upper()}] {event.title}"
    body = event_body(event)
    if body:
        text += f"\n\n{body}"
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 1] + "…"
    return text


def retry_after_header(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the HTTP-date form is rare from these services and ignored)."""
    value = response.headers.get("retry-after", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class HttpChannel(Channel):
    """A channel that POSTs over HTTP: the one call site, its timeout and its network errors."""

    def redact(self, text: str) -> str:
        """What the other side said, fit to keep: every secret this process can send (the
        channel's own among them), whole or in pieces, redacted."""
        return secrets_scrubbed(text)

    def post(
        self,
        url: str,
        *,
        carries: str = "",
        content: bytes | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """POST once; a network failure or timeout is a transient `TransportError`, an address
        the outbound URL policy refuses a permanent one (nothing is sent), and so is a URL the
        secret it `carries` (the variable's name) may not be sent to. Redirects are never
        followed, and proxies from the environment are not used: the policy judges the address
        actually connected to."""
        problem = secret_destination_problem(carries, url)
        if problem:
            raise TransportError(f"{self.label} was not called: {problem}", permanent=True)
        try:
            with httpx.Client(
                timeout=TIMEOUT,
                follow_redirects=False,
                trust_env=False,
                transport=policy_transport(),
            ) as client:
                return client.post(url, content=content, json=json, headers=headers)
        except OutboundRefused as exc:
            raise TransportError(
                f"{self.label} was not called, {BLOCKED}: {self.redact(str(exc))}.", permanent=True
            ) from exc
        except httpx.TimeoutException as exc:
            raise TransportError(
                f"{self.label} did not answer in time ({type(exc).__name__})."
            ) from exc
        except httpx.HTTPError as exc:
            detail = self.redact(str(exc)) or type(exc).__name__
            raise TransportError(f"Could not reach {self.label}: {detail}") from exc
