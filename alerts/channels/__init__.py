"""The alert channels: one module per kind, one contract (`Channel.send`, `TransportError`),
one registry from kind to class that the model's choices and the admin read."""

from __future__ import annotations

from alerts.channels.base import TIMEOUT, Alert, Channel, ChannelSpec, TransportError, event_text
from alerts.channels.mail import EmailChannel
from alerts.channels.slack import SlackChannel
from alerts.channels.telegram import TelegramChannel
from alerts.channels.webhook import WebhookChannel, signature, webhook_body

CHANNELS: dict[str, type[Channel]] = {
    cls.kind: cls for cls in (TelegramChannel, SlackChannel, EmailChannel, WebhookChannel)
}
KIND_CHOICES = [(kind, cls.label) for kind, cls in CHANNELS.items()]


def channel_for(spec: ChannelSpec) -> Channel:
    """The channel a kind and config describe (an `AlertChannel` row's). Raises `TransportError`
    (permanent) when its kind is unknown or its config invalid."""
    cls = CHANNELS.get(spec.kind)
    if cls is None:
        raise TransportError(f"Unknown channel kind {spec.kind!r}.", permanent=True)
    return cls(spec.config)


__all__ = [
    "CHANNELS",
    "KIND_CHOICES",
    "TIMEOUT",
    "Alert",
    "Channel",
    "ChannelSpec",
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
