"""The alert channels: one module per kind, one contract (`Channel.send`, `TransportError`),
one registry from kind to class that the model's choices and the admin read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alerts.channels.base import TIMEOUT, Channel, TransportError, event_text
from alerts.channels.mail import EmailChannel
from alerts.channels.slack import SlackChannel
from alerts.channels.telegram import TelegramChannel
from alerts.channels.webhook import WebhookChannel, signature, webhook_body

if TYPE_CHECKING:
    from alerts.models import AlertChannel

CHANNELS: dict[str, type[Channel]] = {
    cls.kind: cls for cls in (TelegramChannel, SlackChannel, EmailChannel, WebhookChannel)
}
KIND_CHOICES = [(kind, cls.label) for kind, cls in CHANNELS.items()]


def channel_for(model: AlertChannel) -> Channel:
    """The channel a row describes. Raises `TransportError` (permanent) when its kind is
    unknown or its config invalid."""
    cls = CHANNELS.get(model.kind)
    if cls is None:
        raise TransportError(f"Unknown channel kind {model.kind!r}.", permanent=True)
    return cls(model.config)


__all__ = [
    "CHANNELS",
    "KIND_CHOICES",
    "TIMEOUT",
    "Channel",
    "EmailChannel",
    "SlackChannel",
    "TelegramChannel",
    "TransportError",
    "WebhookChannel",
    "channel_for",
    "event_text",
    "signature",
    "webhook_body",
]
