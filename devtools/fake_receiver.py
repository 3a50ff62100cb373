"""A fake alert receiver over loopback HTTP, for the tests and for drills: it answers like
Telegram's Bot API, a Slack incoming webhook and a generic webhook, records everything it
receives, and fails on demand.

    with FakeReceiver() as receiver:
        receiver.telegram_base_url      # a channel's api_base_url
        receiver.url + "/slack/T0/B0/x" # a Slack webhook URL
        receiver.url + "/hook/ops"      # a generic webhook URL
        receiver.set_mode("rate_limit", times=1, retry_after=2)
        ...
        receiver.messages[0]["text"], receiver.messages[0].path, receiver.messages[0].headers

A Telegram message sent with `parse_mode: "HTML"` is parsed as Telegram parses it: a tag it
doesn't know, one left open, or a `<`, `>` or `&` that isn't escaped is answered 400 "can't parse
entities", a text over 4096 characters once parsed 400 "message is too long";
`received.rendered` is the text as the chat shows it.

Routes: POST /bot<token>/sendMessage (Telegram), POST /slack/... (Slack), POST /hook/...
(webhook). Modes (`MODES`): ok, unauthorized (Telegram 401, Slack 403 invalid_token, webhook
401), error (500), rate_limit (429 with Retry-After, and Telegram's parameters.retry_after),
hang (no answer until the client goes away, at most HANG_CAP_SECONDS). A mode set with
`times=n` applies to the next n requests, then the receiver answers ok again.

`manage.py fakereceiver` serves it in the foreground.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from devtools.fake_provider.app import disconnected_within, read_body
from devtools.fake_provider.server import LoopbackServer

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MODES = ("ok", "unauthorized", "error", "hang", "rate_limit")
HANG_CAP_SECONDS = 60.0
TELEGRAM_PATH = re.compile(r"/bot(?P<token>[^/]+)/(?P<method>[A-Za-z]+)")


# The tags of Telegram's HTML style that take no attribute, and the named entities it knows.
TELEGRAM_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "blockquote"}
)
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_MARKUP = re.compile(r"<(/?)([A-Za-z-]*)>|&(#\d{1,7}|#x[0-9A-Fa-f]{1,6}|[A-Za-z]+);|[<>&]")
TELEGRAM_MAX_TEXT = 4096


def telegram_rendered(text: str, parse_mode: str | None) -> tuple[str, str]:
    """The text a chat shows for a message, and Telegram's complaint ("" when it parses)."""
    if parse_mode != "HTML":
        return text, ""
    shown: list[str] = []
    open_tags: list[str] = []
    at = 0
    for match in _MARKUP.finditer(text):
        shown.append(text[at : match.start()])
        at = match.end()
        closing, tag, entity = match.group(1), match.group(2), match.group(3)
        if tag is not None:
            tag = tag.lower()
            if tag not in TELEGRAM_TAGS:
                return "", f'Unsupported start tag "{tag}" at byte offset {match.start()}'
            if not closing:
                open_tags.append(tag)
            elif not open_tags or open_tags.pop() != tag:
                return "", f'Unmatched end tag at byte offset {match.start()}, expected "</{tag}>"'
        elif entity is not None:
            if entity.startswith("#"):
                code = int(entity[2:], 16) if entity[1:2] in "xX" else int(entity[1:])
                shown.append(chr(code) if 0 < code < 0x110000 else "")
            elif entity in _ENTITIES:
                shown.append(_ENTITIES[entity])
            else:
                return "", f'Unsupported entity "{entity}" at byte offset {match.start()}'
        else:
            return "", f'Unexpected "{match.group(0)}" at byte offset {match.start()}'
    if open_tags:
        return "", f'Can\'t find end tag corresponding to start tag "{open_tags[-1]}"'
    shown.append(text[at:])
    return "".join(shown), ""


@dataclass(frozen=True)
class Received:
    """One request as it arrived, and the status it was answered with (None: hung)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int | None
    json: Any = None

    def __getitem__(self, key: str) -> Any:
        """A key of the JSON body: `received["text"]`."""
        if not isinstance(self.json, dict):
            raise KeyError(key)
        return self.json[key]

    @property
    def text(self) -> str:
        """What a human would read: Telegram's and Slack's "text"."""
        return self.json.get("text", "") if isinstance(self.json, dict) else ""

    @property
    def rendered(self) -> str:
        """A Telegram message as the chat shows it: its HTML parsed (the text, otherwise)."""
        parse_mode = self.json.get("parse_mode") if isinstance(self.json, dict) else None
        return telegram_rendered(self.text, parse_mode)[0]


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _json(status: int, payload: Any, **headers: str) -> Reply:
    extra = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return Reply(status, json.dumps(payload).encode(), headers=extra)


def _text(status: int, text: str, **headers: str) -> Reply:
    extra = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return Reply(status, text.encode(), content_type="text/plain; charset=utf-8", headers=extra)


class ReceiverState:
    """The mode and the record, shared by the server's thread and whoever drives it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mode = "ok"
        self._times: int | None = None
        self.retry_after = 1
        self._messages: list[Received] = []

    def set_mode(self, mode: str, *, times: int | None = None, retry_after: int = 1) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        with self._lock:
            self._mode, self._times, self.retry_after = mode, times, retry_after

    def take_mode(self) -> tuple[str, int]:
        """The mode for the request arriving now (counting down a mode set for n times)."""
        with self._lock:
            mode = self._mode
            if self._times is not None:
                self._times -= 1
                if self._times <= 0:
                    self._mode, self._times = "ok", None
            return mode, self.retry_after

    def record(self, received: Received) -> None:
        with self._lock:
            self._messages.append(received)

    @property
    def messages(self) -> list[Received]:
        with self._lock:
            return list(self._messages)

    def reset(self) -> None:
        with self._lock:
            self._mode, self._times, self.retry_after = "ok", None, 1
            self._messages.clear()


class FakeReceiverApp:
    """The raw ASGI app. `telegram_token`: when set, any other token is answered 401.
    `hook_secret`: when set, a webhook without the right signature is answered 401."""

    def __init__(
        self,
        state: ReceiverState,
        *,
        telegram_token: str | None = None,
        hook_secret: str | None = None,
        hook_header: str = "X-Failover-Signature",
    ) -> None:
        self.state = state
        self.telegram_token = telegram_token
        self.hook_secret = hook_secret
        self.hook_header = hook_header.lower()
        self._message_ids = iter(range(1, 1_000_000_000))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        body = await read_body(receive)
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        mode, retry_after = self.state.take_mode()
        reply = self._reply(method, path, headers, body, payload, mode, retry_after)
        self.state.record(
            Received(method, path, headers, body, None if reply is None else reply.status, payload)
        )
        logger.info("%s %s -> %s", method, path, "hang" if reply is None else reply.status)
        if reply is None:
            if not await disconnected_within(receive, HANG_CAP_SECONDS):
                await _deliver(_text(504, "hung for the maximum time"), send)
            return
        await _deliver(reply, send)

    def _reply(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        payload: Any,
        mode: str,
        retry_after: int,
    ) -> Reply | None:
        telegram = TELEGRAM_PATH.fullmatch(path)
        if telegram:
            return self._telegram(method, telegram, payload, mode, retry_after)
        if path.startswith("/slack/"):
            return _slack(method, mode, retry_after)
        if path.startswith("/hook/"):
            return self._hook(method, headers, body, mode, retry_after)
        return _text(404, "no such endpoint")

    def _telegram(
        self, method: str, match: re.Match[str], payload: Any, mode: str, retry_after: int
    ) -> Reply | None:
        def error(code: int, description: str, **parameters: Any) -> Reply:
            answer: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
            if parameters:
                answer["parameters"] = parameters
            return _json(code, answer)

        if mode == "hang":
            return None
        if mode == "unauthorized" or (
            self.telegram_token is not None and match["token"] != self.telegram_token
        ):
            return error(401, "Unauthorized")
        if match["method"] != "sendMessage":
            return error(404, "Not Found")
        if mode == "error":
            return error(500, "Internal Server Error")
        if mode == "rate_limit":
            return error(
                429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after
            )
        if not isinstance(payload, dict) or not payload.get("text"):
            return error(400, "Bad Request: message text is empty")
        if payload.get("chat_id") in (None, ""):
            return error(400, "Bad Request: chat_id is empty")
        parse_mode = payload.get("parse_mode")
        if parse_mode not in (None, "", "HTML", "MarkdownV2", "Markdown"):
            return error(400, f"Bad Request: unsupported parse_mode {parse_mode!r}")
        shown, problem = telegram_rendered(str(payload["text"]), parse_mode)
        if problem:
            return error(400, f"Bad Request: can't parse entities: {problem}")
        if len(shown.encode("utf-16-le")) // 2 > TELEGRAM_MAX_TEXT:
            return error(400, "Bad Request: message is too long")
        result = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": payload["chat_id"], "type": "group"},
            "text": payload["text"],
        }
        return _json(200, {"ok": True, "result": result})

    def _hook(
        self, method: str, headers: dict[str, str], body: bytes, mode: str, retry_after: int
    ) -> Reply | None:
        if method != "POST":
            return _json(405, {"error": "method not allowed"})
        if mode == "hang":
            return None
        if mode == "unauthorized":
            return _json(401, {"error": "unauthorized"})
        if self.hook_secret is not None:
            expected = (
                "sha256=" + hmac.new(self.hook_secret.encode(), body, hashlib.sha256).hexdigest()
            )
            if not hmac.compare_digest(headers.get(self.hook_header, ""), expected):
                return _json(401, {"error": "bad signature"})
        if mode == "error":
            return _json(500, {"error": "internal error"})
        if mode == "rate_limit":
            return _json(429, {"error": "slow down"}, retry_after=str(retry_after))
        return _json(200, {"ok": True})


def _slack(method: str, mode: str, retry_after: int) -> Reply | None:
    if method != "POST":
        return _text(405, "invalid_method")
    if mode == "hang":
        return None
    if mode == "unauthorized":
        return _text(403, "invalid_token")
    if mode == "error":
        return _text(500, "internal_error")
    if mode == "rate_limit":
        return _text(429, "rate_limited", retry_after=str(retry_after))
    return _text(200, "ok")


async def _deliver(reply: Reply, send: Send) -> None:
    headers = [
        (b"content-type", reply.content_type.encode()),
        (b"content-length", str(len(reply.body)).encode()),
        *reply.headers,
    ]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


class FakeReceiver(LoopbackServer):
    """The fake receiver on 127.0.0.1 (a free port unless given) for as long as it is started;
    usable as a context manager."""

    label = "fake receiver"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        telegram_token: str | None = None,
        hook_secret: str | None = None,
        hook_header: str = "X-Failover-Signature",
    ) -> None:
        self.state = ReceiverState()
        app = FakeReceiverApp(
            self.state,
            telegram_token=telegram_token,
            hook_secret=hook_secret,
            hook_header=hook_header,
        )
        super().__init__(app, host=host, port=port)

    @property
    def telegram_base_url(self) -> str:
        """What a Telegram channel's api_base_url is set to."""
        return self.url

    def set_mode(self, mode: str, *, times: int | None = None, retry_after: int = 1) -> None:
        """Answer the next `times` requests (all, when None) in `mode`."""
        self.state.set_mode(mode, times=times, retry_after=retry_after)

    @property
    def messages(self) -> list[Received]:
        """Every request received, in order, whatever it was answered."""
        return self.state.messages

    def messages_to(self, prefix: str) -> list[Received]:
        return [message for message in self.messages if message.path.startswith(prefix)]

    def reset(self) -> None:
        self.state.reset()
