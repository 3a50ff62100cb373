"""The floor of any Python proxy: a raw ASGI app (no Django) that forwards each POST body to the
upstream's `/api/chat` through one pooled `httpx.AsyncClient` and answers with the upstream's body.

    BENCH_UPSTREAM=http://127.0.0.1:11434 PROVIDER_HTTP_CLIENT=httpx \
        uvicorn passthrough:app --app-dir bench --loop uvloop --http httptools --lifespan on

PROVIDER_HTTP_CLIENT=aiohttp puts the platform's
`gateway.adapters.aiohttp_transport.AiohttpTransport` under the same client, as the gateway's
`gateway.adapters.pool` does (run from the project's root, so `gateway` imports). The client
is set up like the gateway's (same limits, no proxies from the environment, no redirects). A
GET answers 200 "ok" (readiness).

PROVIDER_HTTP_CLIENT=bare is the Python floor: no httpx at all, one pooled
`aiohttp.ClientSession` (same connection limit), the body forwarded and the answer read whole.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:11434")
TRANSPORT = os.environ.get("PROVIDER_HTTP_CLIENT", "httpx")
MAX_CONNECTIONS = 256  # as providers.pool

_client: httpx.AsyncClient | None = None
_session: Any = None  # the bare floor's aiohttp.ClientSession


def _make_session() -> Any:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=30),
        trust_env=False,
    )


async def _forward_bare(body: bytes) -> tuple[int, bytes, bytes]:
    global _session
    if _session is None:
        _session = _make_session()
    async with _session.post(
        UPSTREAM + "/api/chat",
        data=body,
        headers={"content-type": "application/json"},
        allow_redirects=False,
    ) as upstream:
        content = await upstream.read()
        content_type = upstream.headers.get("content-type", "application/json").encode()
        return upstream.status, content, content_type


def _make_client() -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=MAX_CONNECTIONS,
        max_keepalive_connections=MAX_CONNECTIONS,
        keepalive_expiry=30,
    )
    transport = None
    if TRANSPORT == "bare":
        raise RuntimeError("the bare floor uses no httpx client")
    if TRANSPORT == "aiohttp":
        from gateway.adapters.aiohttp_transport import AiohttpTransport

        transport = AiohttpTransport(limits=limits)
    elif TRANSPORT != "httpx":
        raise RuntimeError("PROVIDER_HTTP_CLIENT must be httpx or aiohttp")
    return httpx.AsyncClient(
        base_url=UPSTREAM,
        timeout=30.0,
        limits=limits,
        transport=transport,
        trust_env=False,
        follow_redirects=False,
    )


async def _reply(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _client
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if TRANSPORT != "bare":
                    _client = _make_client()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if _client is not None:
                    await _client.aclose()
                if _session is not None:
                    await _session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    if scope["method"] != "POST":
        await _reply(send, 200, b"ok", b"text/plain")
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if TRANSPORT == "bare":
        await _reply(send, *await _forward_bare(body))
        return
    if _client is None:  # served without the lifespan protocol
        _client = _make_client()
    upstream = await _client.request("POST", "/api/chat", content=body)
    await _reply(
        send,
        upstream.status_code,
        upstream.content,
        upstream.headers.get("content-type", "application/json").encode(),
    )
