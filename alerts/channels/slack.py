"""Slack: an incoming webhook, {"text": …}.

config: {"webhook_url_env": "SLACK_WEBHOOK_URL"}; the URL is itself the credential, so it stays
in the environment like a token.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError

from alerts.channels.base import (
    Alert,
    ConfigErrors,
    HttpChannel,
    TransportError,
    env_secret,
    event_text,
    retry_after_header,
)
from providers.models import http_url_validator
from providers.models.outbound import BLOCKED, REFUSED_CODE
from providers.models.secret_env import secret_env_read

# Slack's error answers are one word ("invalid_token", "no_service"): shown as they are. Any
# other body is not shown, only the status.
SLACK_ERROR = re.compile(r"[a-z][a-z0-9_]{0,63}")


def slack_escape(text: str) -> str:
    """Slack reads &, < and > as markup (links, mentions): these three, and only these, are
    escaped, so "p95 > 5 s" arrives as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _valid_url(url: str) -> bool:
    try:
        http_url_validator(url)
    except ValidationError:
        return False
    return True


class SlackChannel(HttpChannel):
    kind = "slack"
    label = "Slack"
    config_help = (
        'Slack: {"webhook_url_env": "SLACK_WEBHOOK_URL"}, the name of the environment variable '
        "holding the incoming webhook's URL (the URL is a secret: it never enters the database)."
    )

    @classmethod
    def clean_config(cls, config: Any) -> dict[str, Any]:
        errors = ConfigErrors(config, allowed=("webhook_url_env",))
        name = errors.env_var(
            "webhook_url_env",
            required=True,
            example="SLACK_WEBHOOK_URL",
            holds="the webhook URL",
        )
        # The URL is the secret itself: where it points is checked here when it is set (a URL
        # the policy refuses is `send`'s to report), and again at every send.
        url = secret_env_read(name)[0] if name and not errors.messages else ""
        if url and _valid_url(url):
            errors.bound("webhook_url_env", name, url)
        errors.raise_if_any()
        return {"webhook_url_env": name}

    def send(self, event: Alert) -> None:
        name = self.config["webhook_url_env"]
        url = env_secret(name, "Slack webhook URL")
        try:
            http_url_validator(url)
        except ValidationError as exc:
            problem = "does not hold an http(s) URL"
            if exc.code == REFUSED_CODE and exc.params:
                problem = f"holds a URL {BLOCKED}: {self.redact(exc.params['refusal'])}"
            raise TransportError(f"{name} {problem}.", permanent=True) from exc
        response = self.post(url, carries=name, json={"text": slack_escape(event_text(event))})
        if response.is_success:
            return
        status = response.status_code
        error = response.text.strip()
        # Slack answers 403 invalid_token, 404 no_service, 410 channel_is_archived: the webhook
        # is gone for good, as it is after a redirect (never followed). 429 and 5xx pass.
        raise TransportError(
            f"Slack answered {status}: "
            f"{error if SLACK_ERROR.fullmatch(error) else response.reason_phrase}",
            permanent=300 <= status < 500 and status != 429,
            retry_after=retry_after_header(response),
        )
