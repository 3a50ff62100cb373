"""The fake provider as a raw ASGI app: routing, faults, delivery and the control endpoints.

Faults apply to the chat endpoints (Ollama's chat and generate, OpenAI's chat completions,
Anthropic's messages, and the embeddings), and to every provider endpoint when scope is "all".
A call is counted, and its body, headers and query kept (`FakeState.last_request`), when it
reaches the app, before any fault. The order inside a call: API key (every dialect, when one is
set: a bearer token for Ollama and OpenAI, x-api-key for Anthropic, api-key for Azure), the
request's JSON, the fault mode, error_rate, the model, the answer (`answers`). `cut_stream` on a
non-streamed call declares the full Content-Length, sends half the body and closes the
connection. Past the fixed `ROUTES`, `azure.route` finds Azure OpenAI's paths and OpenAI's
endpoints under a path prefix (Azure's api-version, key and deployment checked first, by
`azure.refusal`).

A streamed answer sends its status and headers at once, then its chunks: under `stall` the
first one comes delay_ms later (a slow time to first token, where `slow` delays the headers
too), or the chunk after the first `after_chunks` (a pause mid-answer), and `chunk_delay_ms`
spaces each chunk from the one before. Both waits end early when the client goes away. A whole
answer (or an error) under `stall` waits delay_ms, like `slow`.

`POST /_control/refuse` answers first (with `Connection: close`), then has the fake's server
close its listener for `for_ms` (see `config`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from devtools.fake_provider import answers, azure, dialects, leaks, ollama_extra
from devtools.fake_provider.chat_request import parse_chat, parse_request, wants_stream
from devtools.fake_provider.config import (
    HANG_CAP_SECONDS,
    ConfigError,
    FakeConfig,
    refuse_seconds,
)
from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, OPENAI, Reply
from devtools.fake_provider.state import FakeState

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# (method, path) -> (dialect, endpoint)
ROUTES = {
    ("POST", "/api/chat"): (OLLAMA, "chat"),
    ("POST", "/api/generate"): (OLLAMA, "generate"),
    ("POST", "/api/show"): (OLLAMA, "show"),
    ("POST", "/api/embed"): (OLLAMA, "embed"),
    ("GET", "/api/tags"): (OLLAMA, "tags"),
    ("GET", "/api/ps"): (OLLAMA, "ps"),
    ("GET", "/api/version"): (OLLAMA, "version"),
    ("GET", "/"): (OLLAMA, "root"),
    ("POST", "/v1/chat/completions"): (OPENAI, "chat"),
    ("GET", "/v1/models"): (OPENAI, "models"),
    ("POST", "/v1/messages"): (ANTHROPIC, "chat"),
    ("POST", "/v1/embeddings"): (OPENAI, "embed"),
}
# The endpoints faults play on (with scope "chat") and that `calls` counts.
_CHAT_ENDPOINTS = ("chat", "generate", "embed")
# Ollama's answer when its queue is full (the busy mode).
OLLAMA_BUSY = "server busy, please try again.  maximum pending requests exceeded"
_PATHS = {path for _, path in ROUTES}
# Modes answered with an error of the same name, before the model is looked at.
_ERROR_MODES = (
    "error",
    "rate_limit",
    "unauthorized",
    "bad_request",
    "context_too_long",
    "overloaded",
    "busy",
)


class FakeProviderApp:
    """ASGI app over a `FakeState` shared with whoever controls it."""

    def __init__(self, state: FakeState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path.startswith("/_control/"):
            await self._control(method, path, receive, send)
            return
        route = ROUTES.get((method, path))
        prefixed = azure.route(method, path) if route is None else None
        if prefixed is not None:
            route = (OPENAI, prefixed.endpoint)
        if route is None:
            status = 405 if path in _PATHS else 404
            await _deliver(dialects.json_reply(status, {"error": "not found"}), send)
            return
        dialect, endpoint = route
        chat = endpoint in _CHAT_ENDPOINTS
        config, rate_fail = self.state.record(path, chat=chat)
        echo = leaks.credentials_of(scope["headers"]) if config.echo_key else ""
        body = await read_body(receive) if method == "POST" else b""
        raw_query = scope.get("query_string", b"")
        self.state.remember(path, body, scope["headers"], raw_query)
        # GET /v1/models is shared: OpenAI's clients send a bearer key, Anthropic's x-api-key.
        keyed = (OPENAI, ANTHROPIC) if endpoint == "models" else (dialect,)
        if prefixed is not None:
            query, headers = raw_query.decode("latin-1"), _headers(scope)
            refused = azure.refusal(prefixed, config, query, headers)
            if refused is not None:
                await _deliver(refused, send, echo)
                return
            body = azure.with_deployment(body, prefixed.deployment)
        elif config.api_key and not any(_authorized(scope, d, config.api_key) for d in keyed):
            await _deliver(dialects.error(dialect, "unauthorized"), send, echo)
            return
        request: dict[str, Any] = {}
        if method == "POST":
            if endpoint == "chat":
                parsed = parse_chat(dialect, body)
            else:
                parsed = parse_request(dialect, endpoint, body)
            if isinstance(parsed, Reply):
                await _deliver(parsed, send, echo)
                return
            request = parsed
        mode = config.mode if chat or config.scope == "all" else "ok"
        wait = self.state.wait_s(config) if mode in ("slow", "stall") else 0.0
        loaded_after = 0.0
        if mode == "loading" and endpoint != "ps":  # the load, then the answer's own time
            loaded_after = self.state.load_wait_s(config, time.monotonic())
            if await disconnected_within(receive, loaded_after + self.state.wait_s(config)):
                return
        elif mode != "ok":
            handled = await _fault(dialect, mode, config, wait, request, receive, send, echo)
            if handled:
                return
        streamed = endpoint in ("chat", "generate") and wants_stream(dialect, request)
        if rate_fail or (mode == "stream_error" and not streamed):
            reply = dialects.error(dialect, "error", status=config.status)
        elif endpoint == "ps" and not self.state.model_loaded(config, time.monotonic()):
            reply = dialects.json_reply(200, {"models": []})  # loading: not in memory yet
        else:
            reply = answers.answer(dialect, endpoint, config, request)
        if loaded_after and dialect == OLLAMA:
            reply = ollama_extra.with_load_duration(reply, loaded_after)
        if mode == "malformed" and reply.status == 200:
            reply = _malformed(reply)
        elif mode == "stream_error" and reply.stream:
            reply = leaks.broken_stream(dialect, reply, echo, after=config.after_chunks)
        elif mode == "cut_stream" and reply.status == 200:
            await _cut(reply, config, receive, send)
            return
        stall = wait if mode == "stall" else 0.0
        if reply.stream:
            pace = config.chunk_delay_ms / 1000
            await _stream(reply, stall, pace, receive, send, stall_at=config.after_chunks)
            return
        if stall and await disconnected_within(receive, stall):
            return
        await _deliver(encoded(reply, config.content_encoding), send, echo)

    async def _control(self, method: str, path: str, receive: Receive, send: Send) -> None:
        if (method, path) == ("GET", "/_control/stats"):
            reply = dialects.json_reply(200, self.state.stats())
        elif (method, path) == ("GET", "/_control/fault"):
            reply = dialects.json_reply(200, self.state.config.to_dict())
        elif (method, path) == ("POST", "/_control/reset"):
            self.state.reset()
            reply = dialects.json_reply(200, self.state.stats())
        elif (method, path) == ("POST", "/_control/refuse"):
            await self._refuse(receive, send)
            return
        elif (method, path) == ("POST", "/_control/fault"):
            try:
                changes = json.loads(await read_body(receive) or b"{}")
                if not isinstance(changes, dict):
                    raise ConfigError("body", "must be a JSON object")
                config = self.state.update(changes)
            except ValueError as exc:  # ConfigError, or JSON that does not parse
                field = exc.field if isinstance(exc, ConfigError) else "body"
                detail = exc.message if isinstance(exc, ConfigError) else "is not valid JSON"
                error = {"error": f"{field}: {detail}", "field": field}
                reply = dialects.json_reply(400, error)
            else:
                reply = dialects.json_reply(200, config.to_dict())
        else:
            reply = dialects.json_reply(404, {"error": "no such control endpoint"})
        await _deliver(reply, send)

    async def _refuse(self, receive: Receive, send: Send) -> None:
        """Answer, then have the server refuse connections for `for_ms`."""
        try:
            changes = json.loads(await read_body(receive) or b"{}")
            if not isinstance(changes, dict):
                raise ConfigError("body", "must be a JSON object")
            unknown = set(changes) - {"for_ms"}
            if unknown:
                raise ConfigError(sorted(unknown)[0], "unknown field")
            seconds = refuse_seconds(changes.get("for_ms"))
        except ValueError as exc:
            field = exc.field if isinstance(exc, ConfigError) else "body"
            detail = exc.message if isinstance(exc, ConfigError) else "is not valid JSON"
            await _deliver(
                dialects.json_reply(400, {"error": f"{field}: {detail}", "field": field}), send
            )
            return
        refuser = self.state.refuser
        if refuser is None:
            error = {"error": "refusing needs the fake provider's own server", "field": "server"}
            await _deliver(dialects.json_reply(501, error), send)
            return
        # This connection is the one not dropped: it closes once the answer is sent.
        keep = getattr(getattr(send, "__self__", None), "transport", None)
        if not await refuser(seconds, keep):
            error = {"error": "already refusing connections", "field": "for_ms"}
            await _deliver(dialects.json_reply(409, error), send)
            return
        closing = ((b"connection", b"close"),)
        await _deliver(
            dialects.json_reply(200, {"refusing_for_ms": round(seconds * 1000)}, closing), send
        )


def _authorized(scope: Scope, dialect: str, api_key: str) -> bool:
    # OpenAI: Authorization: Bearer KEY; Anthropic: x-api-key: KEY.
    header, expected = (
        (b"x-api-key", api_key.encode())
        if dialect == ANTHROPIC
        else (b"authorization", b"Bearer " + api_key.encode())
    )
    for name, value in scope["headers"]:
        if name == header:
            return bool(value == expected)
    return False


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
    }


async def _fault(
    dialect: str,
    mode: str,
    config: FakeConfig,
    wait: float,
    request: dict[str, Any],
    receive: Receive,
    send: Send,
    echo: str,
) -> bool:
    """Play the fault before answering; True when the call is done with."""
    if mode == "hang":
        if not await disconnected_within(receive, HANG_CAP_SECONDS):
            message = "The fake provider hung for its maximum time."
            reply = dialects.error(dialect, "error", status=504, message=message)
            await _deliver(reply, send, echo)
        return True
    if mode == "slow":
        return await disconnected_within(receive, wait)
    if mode == "busy" and dialect == OLLAMA:
        await _deliver(dialects.json_reply(503, {"error": OLLAMA_BUSY}), send, echo)
        return True
    if mode in _ERROR_MODES:
        prompt_tokens = dialects.count_words(request.get("messages"))
        reply = dialects.error(
            dialect,
            "overloaded" if mode == "busy" else mode,
            status=config.status,
            model=request.get("model", ""),
            prompt_tokens=prompt_tokens,
            retry_after=config.retry_after,
        )
        await _deliver(reply, send, echo)
        return True
    return False


def _malformed(reply: Reply) -> Reply:
    """The same reply with its first line (or the whole body) broken off mid-JSON."""
    first = reply.chunks[0]
    broken = first[: max(1, len(first) // 2)].rstrip()
    if reply.stream:
        return Reply(
            200,
            reply.content_type,
            [broken + reply.separator, *reply.chunks[1:]],
            stream=True,
            headers=reply.headers,
            separator=reply.separator,
        )
    return Reply(200, reply.content_type, (broken,), headers=reply.headers)


def encoded(reply: Reply, encoding: str) -> Reply:
    """A whole reply's body in `encoding` (`FakeConfig.content_encoding`)."""
    if not encoding:
        return reply
    body = reply.chunks[0]
    body = gzip.compress(body) if encoding == "gzip" else b"not gzip: " + body
    return dataclasses.replace(
        reply, chunks=(body,), headers=(*reply.headers, (b"content-encoding", b"gzip"))
    )


async def _deliver(reply: Reply, send: Send, echo: str = "") -> None:
    """Send a whole (not streamed) reply with its Content-Length; an error's message quoting
    `echo` (the request's credentials) when it is given."""
    reply = leaks.echoing(reply, echo)
    body = reply.chunks[0]
    headers = [
        (b"content-type", reply.content_type),
        *reply.headers,
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _stream(
    reply: Reply, stall: float, pace: float, receive: Receive, send: Send, *, stall_at: int = 0
) -> None:
    """Send the status and headers at once, each chunk `pace` seconds after the one before, and
    chunk number `stall_at` (0: the first) `stall` seconds later still; stop as soon as the
    client goes away."""
    headers = [(b"content-type", reply.content_type), *reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    for index, chunk in enumerate(reply.chunks):
        wait = (pace if index else 0.0) + (stall if index == stall_at else 0.0)
        if wait and await disconnected_within(receive, wait):
            return
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _cut(reply: Reply, config: FakeConfig, receive: Receive, send: Send) -> None:
    """Send the first chunk (or half the body; with cut_after_bytes, that many bytes of the body,
    chunk by chunk as a stream would), wait delay_ms, then drop the connection."""
    headers = [(b"content-type", reply.content_type), *reply.headers]
    body = b"".join(reply.chunks)
    if not reply.stream:
        headers.append((b"content-length", str(len(body)).encode()))
    if config.cut_after_bytes:
        pieces, left = [], config.cut_after_bytes
        for chunk in reply.chunks:
            if left <= 0:
                break
            pieces.append(chunk[:left])
            left -= len(chunk)
    else:
        pieces = [reply.chunks[0] if reply.stream else body[: len(body) // 2]]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    pace = config.chunk_delay_ms / 1000 if reply.stream else 0.0
    for index, piece in enumerate(pieces):
        if index and pace and await disconnected_within(receive, pace):
            return
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    delay = config.delay_ms / 1000
    if delay and await disconnected_within(receive, delay):
        return
    # ASGI has no "abort": reach the server's transport behind `send` (uvicorn's cycle has it).
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise ConnectionAbortedError("fake provider: cut_stream")
    transport.close()
    # Returning once the server has seen the connection go keeps it from logging an error.
    await disconnected_within(receive, 5.0)


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def disconnected_within(receive: Receive, seconds: float) -> bool:
    """Wait up to `seconds` for the client to go away; True if it did."""
    try:
        async with asyncio.timeout(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True
