"""Routing at `route()` itself (the `bench` fixture, `conftest.py`): an in-memory snapshot, the
store of the pass (memory; Redis in the services pass) and the suite's fake providers over
loopback. No database, no ASGI app, no ledger: what the walk decides and what it leaves in the
store, and nothing else."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from devtools.fake_provider import FakeProvider
from gateway.adapters.messages import CompletionRequest
from gateway.engine.config import PolicyConfig, ProviderConfig, Snapshot
from gateway.engine.faq import FaqEntry, FaqIndex
from gateway.routing.cascade import route
from gateway.routing.ports import Ports
from gateway.routing.result import RouteResult
from gateway.routing.walk import RouteRequest
from providers.services.seeding import DEFAULT_ANSWERS_FILE
from runtime.gateway import Gateway


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
