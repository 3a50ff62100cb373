# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""A client app's requests-per-minute limit as production serves it: uvicorn with 1, 2 and 4
workers on PostgreSQL and Redis, 100 concurrent requests of a fresh app limited to 20 a minute
on each door, exactly 20 admitted, whichever worker took each."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings

from tests.conftest import child_process_env
from tests.factories import make_client_app
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    primary,
    providers_configured,
    secondary,
)
from tests.serving import uvicorn_serving

LIMIT = 20
CONCURRENT = 100

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHAT = [{"role": "user", "content": "Hi."}]
DOORS = {
    "complete": ("POST", "/api/v1/complete", {"prompt": "Hi."}),
    "chat": ("POST", "/v1/chat/completions", {"model": "auto", "messages": CHAT}),
    "chat-stream": (
        "POST",
        "/v1/chat/completions",
        {"model": "auto", "messages": CHAT, "stream": True},
    ),
    "messages": ("POST", "/v1/messages", {"model": "auto", "max_tokens": 50, "messages": CHAT}),
    "responses": ("POST", "/v1/responses", {"model": "auto", "input": "Hi."}),
    "embeddings": ("POST", "/v1/embeddings", {"model": "auto", "input": "Hi."}),
    "count_tokens": ("POST", "/v1/messages/count_tokens", {"model": "auto", "messages": CHAT}),
    "models": ("GET", "/v1/models", None),
}


@pytest.mark.parametrize("workers", [1, 2, 4])
async def test_a_limit_of_20_admits_exactly_20_of_100_concurrent_requests_on_every_door(
    providers_configured, primary, tmp_path, workers
):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    primary.set_fault(embedding_models=["nomic-embed-text"])
    local = providers_configured["primary"]
    local.embedding_models = "nomic-embed-text"
    await sync_to_async(local.save)()
    keys = {}
    for n, door in enumerate(DOORS):
        key = f"fgw_r{workers}{n:02d}-{door}".ljust(47, "0")
        await sync_to_async(make_client_app)(key=key, requests_per_minute=LIMIT)
        keys[door] = key
    env = child_process_env(tmp_path / "data")
    url, process = await asyncio.to_thread(
        uvicorn_serving, env, tmp_path, workers=workers, ready="/readyz"
    )
    try:
        limits = httpx.Limits(max_connections=CONCURRENT, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
            for door, (method, path, body) in DOORS.items():
                headers = {"Authorization": f"Bearer {keys[door]}"}
                answers = await asyncio.gather(
                    *(
                        http.request(method, path, json=body, headers=headers)
                        for _ in range(CONCURRENT)
                    )
                )
                statuses = sorted(answer.status_code for answer in answers)
                odd = [a.text[:300] for a in answers if a.status_code not in (200, 429)][:1]
                assert statuses == [200] * LIMIT + [429] * (CONCURRENT - LIMIT), (door, odd)
                assert all(a.headers.get("Retry-After") for a in answers if a.status_code == 429)
    finally:
        process.terminate()
        process.wait(timeout=30)
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
