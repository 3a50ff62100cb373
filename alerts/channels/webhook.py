"""A generic webhook: the event as JSON, signed with HMAC-SHA256 when a secret is configured.

config: {"url": "https://ops.example.com/hooks/failover", "secret_env": "ALERT_WEBHOOK_SECRET",
         "header": "X-Failover-Signature"}

The body: {"id", "kind", "severity", "key", "title", "message", "data", "created_at"}. With a
secret, the header carries `sha256=<hex HMAC-SHA256 of the exact body bytes>`: the receiver
computes the same over the bytes it received and compares in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from alerts.channels.base import (
    Alert,
    ConfigErrors,
    HttpChannel,
    TransportError,
    env_secret,
    retry_after_header,
)

DEFAULT_HEADER = "X-Failover-Signature"
HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")
# 408 (the receiver timed out) and 429 (slow down) pass; any other 4xx means the request itself
# is refused (a wrong URL, a rejected signature), and sending it again won't change that. So
# does a redirect: it is never followed, so the URL is wrong until it is changed.
TRANSIENT_CLIENT_ERRORS = (408, 429)


def webhook_body(event: Alert) -> bytes:
    payload = {
        "id": event.id,
        "kind": event.kind,
        "severity": event.severity,
        "key": event.key,
        "title": event.title,
        "message": event.message,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }
    return json.dumps(payload, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookChannel(HttpChannel):
    kind = "webhook"
    label = "Webhook"
    config_help = (
        'Webhook: {"url": "https://…", "secret_env": "ALERT_WEBHOOK_SECRET", "header": '
        f'"{DEFAULT_HEADER}"}}; secret_env (optional) names the environment variable holding '
        "the HMAC key, and header (optional) the signature's header."
    )

    @classmethod
    def clean_config(cls, config: Any) -> dict[str, Any]:
        errors = ConfigErrors(config, allowed=("url", "secret_env", "header"))
        url = errors.http_url("url", required=True)
        secret_env = errors.env_var(
            "secret_env", required=False, example="ALERT_WEBHOOK_SECRET", holds="the HMAC key"
        )
        errors.bound("secret_env", secret_env, url)
        header = errors.string("header", required=False, default=DEFAULT_HEADER)
        if header and not HEADER_NAME.fullmatch(header):
            errors.add("header", f"{header!r} is not an HTTP header name (letters, digits, '-').")
        errors.raise_if_any()
        return {"url": url, "secret_env": secret_env, "header": header or DEFAULT_HEADER}

    def send(self, event: Alert) -> None:
        body = webhook_body(event)
        headers = {"Content-Type": "application/json"}
        if self.config["secret_env"]:
            secret = env_secret(self.config["secret_env"], "webhook's HMAC key")
            headers[self.config["header"]] = signature(secret, body)
        response = self.post(
            self.config["url"], carries=self.config["secret_env"], content=body, headers=headers
        )
        if response.is_success:
            return
        status = response.status_code
        # The status, never the body: the URL may name any host the policy allows, and what
        # answered there is not for the admin's pages to show.
        message = f"The webhook answered {status} {response.reason_phrase}".rstrip()
        if response.is_redirect:
            message += " (redirects are not followed: set the URL it points to)"
        raise TransportError(
            message,
            permanent=300 <= status < 500 and status not in TRANSIENT_CLIENT_ERRORS,
            retry_after=retry_after_header(response),
        )
