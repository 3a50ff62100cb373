"""The fake provider as a raw ASGI app: routing, faults, delivery and the control endpoints.

Faults apply to the chat endpoints, and to every provider endpoint when scope is "all". A call
is counted when it reaches the app, before any fault. The order inside a call: API key (OpenAI
and Anthropic endpoints, when one is set), the request's JSON, the fault mode, error_rate, the
model, the answer. `cut_stream` on a non-streamed call declares the full Content-Length, sends
half the body and closes the connection.

A streamed answer sends its status and headers at once, then its chunks: under `stall` the
first one comes delay_ms later (a slow time to first token, where `slow` delays the headers
too), and `chunk_delay_ms` spaces each chunk from the one before. Both waits end early when the
client goes away. A whole answer (or an error) under `stall` waits delay_ms, like `slow`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from providers.fake_provider import dialects, leaks
from providers.fake_provider.config import HANG_CAP_SECONDS, ConfigError, FakeConfig, FakeState
from providers.fake_provider.dialects import ANTHROPIC, OLLAMA, OPENAI, Reply

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# (method, path) -> (dialect, endpoint)
ROUTES = {
    ("POST", "/api/chat"): (OLLAMA, "chat"),
    ("GET", "/api/tags"): (OLLAMA, "tags"),
    ("GET", "/api/ps"): (OLLAMA, "ps"),
    ("GET", "/api/version"): (OLLAMA, "version"),
    ("GET", "/"): (OLLAMA, "root"),
    ("POST", "/v1/chat/completions"): (OPENAI, "chat"),
    ("GET", "/v1/models"): (OPENAI, "models"),
    ("POST", "/v1/messages"): (ANTHROPIC, "chat"),
}
_PATHS = {path for _, path in ROUTES}
# Modes answered with an error of the same name, before the model is looked at.
_ERROR_MODES = (
    "error",
    "rate_limit",
    "unauthorized",
    "bad_request",
    "context_too_long",
    "overloaded",
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
        if route is None:
            status = 405 if path in _PATHS else 404
            await _deliver(dialects.json_reply(status, {"error": "not found"}), send)
            return
        dialect, endpoint = route
        chat = endpoint == "chat"
        config, rate_fail = self.state.record(path, chat=chat)
        echo = leaks.credentials_of(scope["headers"]) if config.echo_key else ""
        body = await read_body(receive) if method == "POST" else b""
        # GET /v1/models is shared: OpenAI's clients send a bearer key, Anthropic's x-api-key.
        key_dialects = (OPENAI, ANTHROPIC) if endpoint == "models" else (dialect,)
        if (
            dialect != OLLAMA
            and config.api_key
            and not any(_authorized(scope, d, config.api_key) for d in key_dialects)
        ):
            await _deliver(dialects.error(dialect, "unauthorized"), send, echo)
            return
        request: dict[str, Any] = {}
        if chat:
            parsed = _parse_chat(dialect, body)
            if isinstance(parsed, Reply):
                await _deliver(parsed, send, echo)
                return
            request = parsed
        mode = config.mode if chat or config.scope == "all" else "ok"
        if mode != "ok":
            handled = await _fault(dialect, mode, config, request, receive, send, echo)
            if handled:
                return
        if rate_fail or (mode == "stream_error" and not _wants_stream(dialect, request)):
            reply = dialects.error(dialect, "error", status=config.status)
        else:
            reply = _answer(dialect, endpoint, config, request)
        if mode == "malformed" and reply.status == 200:
            reply = _malformed(reply)
        elif mode == "stream_error" and reply.stream:
            reply = leaks.broken_stream(dialect, reply, echo)
        elif mode == "cut_stream" and reply.status == 200:
            await _cut(reply, config.delay_ms / 1000, receive, send)
            return
        stall = config.delay_ms / 1000 if mode == "stall" else 0.0
        if reply.stream:
            await _stream(reply, stall, config.chunk_delay_ms / 1000, receive, send)
            return
        if stall and await disconnected_within(receive, stall):
            return
        await _deliver(reply, send, echo)

    async def _control(self, method: str, path: str, receive: Receive, send: Send) -> None:
        if (method, path) == ("GET", "/_control/stats"):
            reply = dialects.json_reply(200, self.state.stats())
        elif (method, path) == ("GET", "/_control/fault"):
            reply = dialects.json_reply(200, self.state.config.to_dict())
        elif (method, path) == ("POST", "/_control/reset"):
            self.state.reset()
            reply = dialects.json_reply(200, self.state.stats())
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


def _parse_chat(dialect: str, body: bytes) -> dict[str, Any] | Reply:
    """The chat request, or the 400 a real provider answers to it."""
    try:
        request = json.loads(body)
    except ValueError:
        return dialects.error(dialect, "bad_request", message="The request body is not valid JSON.")
    if not isinstance(request, dict):
        return dialects.error(dialect, "bad_request", message="The request body must be an object.")
    if not isinstance(request.get("model"), str) or not request["model"]:
        return dialects.error(dialect, "bad_request", message="model is required", param="model")
    if not isinstance(request.get("messages"), list):
        return dialects.error(
            dialect, "bad_request", message="messages must be a list", param="messages"
        )
    if dialect == OPENAI:
        for name in ("max_completion_tokens", "max_tokens"):
            value = request.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                return dialects.error(
                    dialect, "bad_request", message=f"{name} must be at least 1", param=name
                )
    if dialect == ANTHROPIC:
        value = request.get("max_tokens")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return dialects.error(
                dialect, "bad_request", message="max_tokens: Field required", param="max_tokens"
            )
    return request


def _limit(dialect: str, request: dict[str, Any]) -> int | None:
    if dialect == ANTHROPIC:
        return int(request["max_tokens"])
    if dialect == OPENAI:
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        return limit if isinstance(limit, int) else None
    options = request.get("options")
    limit = options.get("num_predict") if isinstance(options, dict) else None
    # Ollama: num_predict -1 (or any value below 1) means no limit.
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    return None


def _wants_stream(dialect: str, request: dict[str, Any]) -> bool:
    # Ollama streams unless told not to; OpenAI and Anthropic only when asked.
    return bool(request.get("stream", dialect == OLLAMA))


def _answer(dialect: str, endpoint: str, config: FakeConfig, request: dict[str, Any]) -> Reply:
    if endpoint == "tags":
        return dialects.ollama_tags(config)
    if endpoint == "ps":
        return dialects.ollama_ps(config)
    if endpoint == "version":
        return dialects.json_reply(200, {"version": "0.0.0-fake"})
    if endpoint == "root":
        return Reply(200, b"text/plain; charset=utf-8", (b"Ollama is running",))
    if endpoint == "models":
        return dialects.openai_models(config)
    model = request["model"]
    if model not in config.models:
        return dialects.error(dialect, "model_not_found", model=model)
    prompt_tokens = dialects.count_words(request["messages"])
    stream = _wants_stream(dialect, request)
    limit = _limit(dialect, request)
    if dialect == OLLAMA:
        return dialects.ollama_chat(
            config, model=model, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    if dialect == ANTHROPIC:
        system = request.get("system")
        if isinstance(system, str):
            prompt_tokens += len(system.split())
        return dialects.anthropic_messages(
            config, model=model, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    options = request.get("stream_options")
    return dialects.openai_chat(
        config,
        model=model,
        prompt_tokens=prompt_tokens,
        limit=limit,
        stream=stream,
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
    )


async def _fault(
    dialect: str,
    mode: str,
    config: FakeConfig,
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
        return await disconnected_within(receive, config.delay_ms / 1000)
    if mode in _ERROR_MODES:
        prompt_tokens = dialects.count_words(request.get("messages"))
        reply = dialects.error(
            dialect,
            mode,
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


async def _stream(reply: Reply, stall: float, pace: float, receive: Receive, send: Send) -> None:
    """Send the status and headers at once, the first chunk `stall` seconds later and each next
    one `pace` seconds after the one before; stop as soon as the client goes away."""
    headers = [(b"content-type", reply.content_type), *reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    for index, chunk in enumerate(reply.chunks):
        wait = pace if index else stall
        if wait and await disconnected_within(receive, wait):
            return
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _cut(reply: Reply, delay: float, receive: Receive, send: Send) -> None:
    """Send the first chunk (or half the body), wait `delay`, then drop the connection."""
    headers = [(b"content-type", reply.content_type), *reply.headers]
    first = reply.chunks[0]
    if not reply.stream:
        headers.append((b"content-length", str(len(first)).encode()))
        first = first[: len(first) // 2]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": first, "more_body": True})
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
