"""Routing at `route()` itself: an in-memory snapshot, the store of the pass (memory; Redis in
the services pass) and the suite's fake providers over loopback. No database, no ASGI app, no
ledger: what the walk decides and what it leaves in the store, and nothing else."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest
import redis
from django.conf import settings

from devtools.fake_provider import FakeProvider
from gateway.adapters.messages import CompletionRequest
from gateway.engine.clock import Clock
from gateway.engine.config import PolicyConfig, ProviderConfig, Snapshot
from gateway.engine.faq import FaqEntry, FaqIndex
from gateway.routing.cascade import route
from gateway.routing.ports import Ports
from gateway.routing.result import RouteResult
from gateway.routing.walk import RouteRequest
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import ResilientStore
from providers.services.seeding import DEFAULT_ANSWERS_FILE
from runtime.gateway import Gateway

# Each test on both stores: memory in the embedded pass, Redis in the services pass.
STORES = [
    pytest.param("memory", marks=pytest.mark.backend_free),
    pytest.param("redis", marks=pytest.mark.services),
]


class RouteBench:
    """What `route` needs (`gateway.routing.ports.Runtime`): a snapshot the test edits in
    place of an operator, and the ports of a gateway of its own."""

    def __init__(self, gateway: Gateway, snapshot: Snapshot) -> None:
        self.gateway = gateway
        self.snapshot = snapshot
        self._sequence = 0

    @property
    def snapshots(self) -> RouteBench:
        return self

    @property
    def ports(self) -> Ports:
        return self.gateway.ports

    async def current(self) -> Snapshot:
        return self.snapshot

    def policy(self, **values: Any) -> None:
        """Change the policy, served from the next request on (a new snapshot version)."""
        self.snapshot = replace(
            self.snapshot,
            version=self.snapshot.version + 1,
            policy=replace(self.snapshot.policy, **values),
        )

    def provider(self, name: str, **values: Any) -> None:
        """Change one provider, served from the next request on."""
        changed = (
            replace(provider, **values) if provider.name == name else provider
            for provider in self.snapshot.providers
        )
        # In the snapshot's order: by priority, then by name (`providers.selectors`).
        self.snapshot = replace(
            self.snapshot,
            version=self.snapshot.version + 1,
            providers=tuple(sorted(changed, key=lambda p: (p.priority, p.name))),
        )

    async def ask(self, prompt: str = "Say hello.", **fields: Any) -> RouteResult:
        self._sequence += 1
        request = RouteRequest(
            completion=CompletionRequest(prompt=prompt), request_id=f"r-{self._sequence}", **fields
        )
        return await route(request, self)


def two_providers(primary: FakeProvider, secondary: FakeProvider) -> Snapshot:
    """The routing tests' pair (as `providers_configured` makes them in the database): the
    self-hosted `ollama-local` first, the cloud's `openai-cloud` next."""
    return Snapshot(
        version=1,
        providers=(
            ProviderConfig(
                name="ollama-local",
                kind="ollama",
                base_url=primary.url,
                model="llama3.1:8b",
                priority=10,
                is_local=True,
                timeout_s=5,
                context_window=8192,
            ),
            ProviderConfig(
                name="openai-cloud",
                kind="openai",
                base_url=secondary.url,
                model="gpt-4o-mini",
                priority=20,
                is_local=False,
                timeout_s=5,
                context_window=128_000,
            ),
        ),
        policy=PolicyConfig(),
        faq=shipped_answers(),
    )


def shipped_answers() -> FaqIndex:
    """The static tier's index over the 50 answers the product ships, as a first start loads
    them (`providers/data/static_answers.json`)."""
    answers = json.loads(DEFAULT_ANSWERS_FILE.read_text(encoding="utf-8"))
    return FaqIndex(
        tuple(
            FaqEntry(
                answer_id=n,
                answer=answer["answer"],
                phrasings=(answer["question"], *answer["alternatives"]),
            )
            for n, answer in enumerate(answers, start=1)
        )
    )


def _store(kind: str) -> MemoryStore | ResilientStore:
    if kind == "memory":
        return MemoryStore()
    if not settings.REDIS_URL:
        pytest.skip("needs Redis: runs in the services pass")
    return ResilientStore(RedisStore(settings.REDIS_URL))


async def route_bench(kind: str, primary: FakeProvider, secondary: FakeProvider, clock: Any):
    """A `RouteBench` on the `kind` of store (`STORES`), closed when the test ends."""
    if kind == "redis":
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
    gateway = Gateway(store=_store(kind), clock=Clock(wall=clock.wall, mono=time.monotonic))
    try:
        yield RouteBench(gateway, two_providers(primary, secondary))
    finally:
        await gateway.adapters.aclose()
        await gateway.store.aclose()
        if kind == "redis":
            redis.Redis.from_url(settings.REDIS_URL).flushdb()
