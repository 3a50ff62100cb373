"""Telegram: the Bot API's `sendMessage`, to one chat, in its HTML parse mode.

Every value is escaped (`&`, `<`, `>`); the only tags are the ones built here: `<b>` for the
title, `<pre>` for the runbook's lines. A message is kept within Telegram's 4096 characters.

config: {"bot_token_env": "TELEGRAM_BOT_TOKEN", "chat_id": -1001234567890,
         "api_base_url": "https://api.telegram.org"}
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from alerts.channels.base import (
    Alert,
    ConfigErrors,
    HttpChannel,
    TransportError,
    env_secret,
    runbook_of,
)

DEFAULT_API_BASE_URL = "https://api.telegram.org"
# Telegram's limit on a message's text, in UTF-16 code units once its entities are parsed.
# The HTML sent is kept within it, so the text it parses to (shorter) is too.
MAX_MESSAGE = 4096
# What a long message leaves for the runbook: its lines come last, and are what to do.
RUNBOOK_ROOM = 1200
# A numeric chat id (negative for groups and channels) or a public channel's @username.
CHAT_ID = re.compile(r"-?\d{1,20}|@[A-Za-z][A-Za-z0-9_]{3,31}")

# Sending again cannot help: a bad request (chat not found, bot not a member), a revoked or
# wrong token, a bot blocked or kicked, a token Telegram doesn't know.
PERMANENT_ERRORS = (400, 401, 403, 404)

_HINTS = {
    400: "check chat_id, and that the bot is a member of the chat",
    401: "the bot token is wrong or was revoked",
    403: "the bot was blocked by the user or removed from the chat",
    404: "the bot token is wrong",
}


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def escaped_within(text: str, room: int) -> str:
    """`text` escaped for Telegram's HTML, cut with "…" to fit in `room` code units: never
    inside an entity, so what is sent always parses."""
    escaped = html.escape(text, quote=False)
    if utf16_len(escaped) <= room:
        return escaped
    pieces: list[str] = []
    used, room = 0, room - 1  # the ellipsis
    for char in text:
        piece = html.escape(char, quote=False)
        if used + utf16_len(piece) > room:
            break
        pieces.append(piece)
        used += utf16_len(piece)
    return "".join(pieces) + "…" if room >= 0 else ""


def telegram_html(event: Alert) -> str:
    """The alert in Telegram's HTML: the title in bold, the message, the runbook's lines as a
    preformatted block."""
    text = "<b>" + escaped_within(f"[{event.severity.upper()}] {event.title}", 1000) + "</b>"
    runbook = "\n".join(runbook_of(event))
    opening, closing = "\n\n<b>Runbook</b>\n<pre>", "</pre>"
    wrapper = utf16_len(opening + closing)
    if event.message:
        needed = wrapper + utf16_len(html.escape(runbook, quote=False)) if runbook else 0
        room = MAX_MESSAGE - utf16_len(text) - 2 - min(needed, RUNBOOK_ROOM)
        text += "\n\n" + escaped_within(event.message, room)
    room = MAX_MESSAGE - utf16_len(text) - wrapper
    if runbook and room > 1:
        text += opening + escaped_within(runbook, room) + closing
    return text


@dataclass(frozen=True)
class TelegramAnswer:
    """Telegram's answer: {"ok": false, "error_code": 401, "description": "Unauthorized",
    "parameters": {"retry_after": 5, "migrate_to_chat_id": -100…}}."""

    ok: bool
    error_code: int
    description: str
    retry_after: float | None = None
    migrate_to_chat_id: int | None = None

    @classmethod
    def parse(cls, body: Any, status: int) -> TelegramAnswer:
        if not isinstance(body, dict):
            return cls(ok=False, error_code=status, description=f"HTTP {status}")
        parameters = body.get("parameters")
        parameters = parameters if isinstance(parameters, dict) else {}
        code = body.get("error_code")
        retry_after = parameters.get("retry_after")
        migrate = parameters.get("migrate_to_chat_id")
        return cls(
            ok=body.get("ok") is True,
            error_code=code if isinstance(code, int) else status,
            description=str(body.get("description") or f"HTTP {status}"),
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
            migrate_to_chat_id=migrate if isinstance(migrate, int) else None,
        )


class TelegramChannel(HttpChannel):
    kind = "telegram"
    label = "Telegram"
    config_help = (
        'Telegram: {"bot_token_env": "TELEGRAM_BOT_TOKEN", "chat_id": -1001234567890} and '
        'optionally "api_base_url" (default https://api.telegram.org). bot_token_env names the '
        "environment variable holding the bot's token, never the token itself."
    )

    @classmethod
    def clean_config(cls, config: Any) -> dict[str, Any]:
        errors = ConfigErrors(config, allowed=("bot_token_env", "chat_id", "api_base_url"))
        token_env = errors.env_var(
            "bot_token_env", required=True, example="TELEGRAM_BOT_TOKEN", holds="the bot token"
        )
        chat_id = errors.config.get("chat_id")
        if chat_id is None or chat_id == "":
            errors.add("chat_id", "is required: the chat's numeric id or a channel's @username.")
        elif isinstance(chat_id, bool) or not isinstance(chat_id, int | str):
            errors.add("chat_id", "must be a number or a string.")
        elif not CHAT_ID.fullmatch(str(chat_id).strip()):
            errors.add("chat_id", f"{chat_id!r} is neither a numeric chat id nor an @username.")
        base_url = errors.http_url("api_base_url", required=False, default=DEFAULT_API_BASE_URL)
        errors.bound("bot_token_env", token_env, base_url or DEFAULT_API_BASE_URL)
        errors.raise_if_any()
        if isinstance(chat_id, str) and re.fullmatch(r"-?\d+", chat_id.strip()):
            chat_id = int(chat_id)
        elif isinstance(chat_id, str):
            chat_id = chat_id.strip()
        return {
            "bot_token_env": token_env,
            "chat_id": chat_id,
            "api_base_url": base_url.rstrip("/") or DEFAULT_API_BASE_URL,
        }

    def send(self, event: Alert) -> None:
        token = env_secret(self.config["bot_token_env"], "Telegram bot token")
        # The token travels in the URL's path: only to the host its variable is bound to, and
        # kept out of every error message (`redact`).
        response = self.post(
            f"{self.config['api_base_url']}/bot{token}/sendMessage",
            carries=self.config["bot_token_env"],
            json={
                "chat_id": self.config["chat_id"],
                "text": telegram_html(event),
                "parse_mode": "HTML",
                # Bot API 7.0's replacement for disable_web_page_preview.
                "link_preview_options": {"is_disabled": True},
            },
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        answer = TelegramAnswer.parse(body, response.status_code)
        if response.is_success and answer.ok:
            return
        message = f"Telegram answered {answer.error_code}: {self.redact(answer.description)}"
        if answer.migrate_to_chat_id is not None:
            message += f" (the group is now chat {answer.migrate_to_chat_id}: set that chat_id)"
        elif answer.error_code in _HINTS:
            message += f" ({_HINTS[answer.error_code]})"
        raise TransportError(
            message,
            permanent=answer.error_code in PERMANENT_ERRORS,
            retry_after=answer.retry_after,
        )
