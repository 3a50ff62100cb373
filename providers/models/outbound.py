"""The outbound URL policy as the control plane applies it: the settings' policy, the check of
a URL when it is saved, and the resolution that both the save-time check and the alert
channels' connections use (gateway/engine/outbound.py holds the rules themselves).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.utils.deconstruct import deconstructible

from gateway.engine.outbound import (
    BLOCKED,
    OutboundPolicy,
    allowed_addresses,
    host_refusal,
    url_refusal,
)

# A ValidationError's code for a URL the policy refuses (its params' "refusal" says why).
REFUSED_CODE = "outbound_url_refused"
_HTTP_URL = URLValidator(
    schemes=["http", "https"],
    message="Enter an http:// or https:// URL.",
    # Its own code, so a form doesn't swap the message for its generic "Enter a valid URL."
    code="invalid_url_scheme",
)


class OutboundRefused(Exception):
    """A connection the outbound URL policy refuses; the message says why."""


def outbound_policy() -> OutboundPolicy:
    """The policy in force (`OUTBOUND_ALLOW`), read each time so a changed setting applies."""
    return OutboundPolicy.allowing(settings.OUTBOUND_ALLOW)


def resolve_allowed(host: str, port: int, policy: OutboundPolicy | None = None) -> list[str]:
    """The addresses `host` resolves to, each one allowed by the policy, in the resolver's
    order. Raises `OutboundRefused` when the host or any address is refused, and
    `socket.gaierror` when the name doesn't resolve."""
    policy = policy or outbound_policy()
    refusal = host_refusal(host, policy)
    if refusal:
        raise OutboundRefused(refusal)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses, refusal = allowed_addresses(host, infos, policy)
    if refusal:
        raise OutboundRefused(refusal)
    return addresses


@deconstructible
class OutboundURLValidator:
    """A URL the gateway may call: an http(s) URL the outbound policy allows, its host checked
    by the addresses it resolves to now (a name that doesn't resolve passes: it is checked again
    on every connection)."""

    def __call__(self, value: object) -> None:
        url = str(value)
        _HTTP_URL(url)
        refusal = url_refusal(url)
        if not refusal:
            parts = urlsplit(url)
            try:
                resolve_allowed(parts.hostname or "", parts.port or _default_port(parts.scheme))
            except OutboundRefused as exc:
                refusal = str(exc)
            except (OSError, UnicodeError):
                pass  # no answer now: the connection checks what it resolves to then
        if refusal:
            raise ValidationError(
                f"{BLOCKED[0].upper()}{BLOCKED[1:]}: %(refusal)s.",
                code=REFUSED_CODE,
                params={"refusal": refusal},
            )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutboundURLValidator)

    def __hash__(self) -> int:
        return hash(OutboundURLValidator)


def _default_port(scheme: str) -> int:
    return 443 if scheme.lower() == "https" else 80


http_url_validator = OutboundURLValidator()
