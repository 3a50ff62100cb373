"""What the platform ships: the 50 static answers, the demo configuration and the demo's model
aliases, each loaded once per database (a `SEED` change marks it loaded, so what an operator
deleted stays deleted)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import models, transaction

from providers.models import (
    AliasEntry,
    ChangeAction,
    ConfigChange,
    ModelAlias,
    Provider,
    ProviderKind,
    StaticAnswer,
)
from providers.services.audit import config_change_record, instance_snapshot
from providers.signals import config_committed_send

DEFAULT_ANSWERS_FILE = Path(__file__).resolve().parent.parent / "data" / "static_answers.json"


def seeded(target_type: str) -> bool:
    return ConfigChange.objects.filter(action=ChangeAction.SEED, target_type=target_type).exists()


@transaction.atomic
def static_answers_load_defaults(*, path: Path = DEFAULT_ANSWERS_FILE) -> int:
    """Load the shipped FAQ answers once per database; returns how many were added.

    Once loaded (a SEED change is on record), answers an operator deleted stay deleted.
    """
    target_type = StaticAnswer._meta.label_lower
    if seeded(target_type):
        return 0
    entries = json.loads(path.read_text(encoding="utf-8"))
    existing = set(StaticAnswer.objects.values_list("question", flat=True))
    added = [
        StaticAnswer(
            question=entry["question"],
            alternative_phrasings="\n".join(entry["alternatives"]),
            answer=entry["answer"],
        )
        for entry in entries
        if entry["question"] not in existing
    ]
    for answer in added:
        answer.full_clean()
    StaticAnswer.objects.bulk_create(added)
    transaction.on_commit(config_committed_send)
    ConfigChange.objects.create(
        actor_name="system",
        action=ChangeAction.SEED,
        target_type=target_type,
        target_repr=f"{len(added)} static answers from {path.name}",
        after={"count": len(added)},
    )
    return len(added)


DEMO_PROVIDERS: tuple[dict[str, Any], ...] = (
    {
        "name": "ollama-local",
        "kind": ProviderKind.OLLAMA,
        "base_url": "http://127.0.0.1:11434",
        "model": "llama3.1:8b",
        "priority": 10,
        "enabled": True,
        "is_local": True,
        "timeout_s": 20.0,
        # Ollama answers a few at once (OLLAMA_NUM_PARALLEL) and queues the rest.
        "max_in_flight": 16,
        "context_window": 8192,
    },
    {
        "name": "openai-cloud",
        "kind": ProviderKind.OPENAI_COMPATIBLE,
        "base_url": "https://api.openai.com",
        "model": "gpt-4o-mini",
        "api_key_env": "OPENAI_API_KEY",
        "priority": 20,
        "enabled": True,
        "is_local": False,
        "timeout_s": 15.0,
        "context_window": 128_000,
        # OpenAI takes it for every model, and its reasoning models take only it.
        "token_limit_field": "max_completion_tokens",
        "supports_images": True,  # gpt-4o-mini reads images; it doesn't think
        # gpt-4o-mini's $0.15 / $0.60 per 1M tokens at 0.93 EUR to the dollar (the seeds
        # think in EUR, the policy's default currency).
        "price_input_per_1m": Decimal("0.1395"),
        "price_output_per_1m": Decimal("0.558"),
    },
    {
        "name": "anthropic-cloud",
        "kind": ProviderKind.ANTHROPIC,
        "base_url": "https://api.anthropic.com",
        "model": "claude-3-5-haiku-latest",
        "api_key_env": "ANTHROPIC_API_KEY",
        "priority": 30,
        "enabled": False,
        "is_local": False,
        "timeout_s": 15.0,
        "context_window": 200_000,
        "supports_images": True,  # Claude 3.5 Haiku reads images; it has no extended thinking
        "price_input_per_1m": Decimal("0.744"),  # $0.80 / $4.00 at 0.93
        "price_output_per_1m": Decimal("3.72"),
    },
)


def demo_providers_create() -> list[models.Model]:
    """The demo's providers, each created unless one of its name is there; returns those made.
    The primary is a local Ollama, the secondary OpenAI's gpt-4o-mini (key from OPENAI_API_KEY),
    Anthropic is present but disabled. Loaded once per database with the demo's budgets, by
    `billing.seeding.demo_configuration_load`."""
    created: list[models.Model] = []
    for values in DEMO_PROVIDERS:
        if not Provider.objects.filter(name=values["name"]).exists():
            provider = Provider(**values)
            provider.full_clean()
            provider.save()
            created.append(provider)
    return created


def demo_rows_recorded(target_type: str, what: str, created: list[models.Model]) -> None:
    """Each demo row created, on the change record, and the part marked loaded."""
    for row in created:
        config_change_record(
            target=row,
            action=ChangeAction.CREATE,
            before=None,
            after=instance_snapshot(row),
            reason="demo configuration",
        )
    ConfigChange.objects.create(
        actor_name="system",
        action=ChangeAction.SEED,
        target_type=target_type,
        target_repr=what,
        after={"created": [str(row) for row in created]},
    )


@dataclass(frozen=True, slots=True)
class DemoAlias:
    """A demo model alias: its providers first (each asked for its own model), then the
    cascade."""

    name: str
    description: str
    providers: tuple[str, ...]


DEMO_ALIASES = (
    DemoAlias("fast", "The local model first, then the cascade.", ("ollama-local",)),
    DemoAlias("smart", "The cloud model first, then the cascade.", ("openai-cloud",)),
)


@transaction.atomic
def demo_aliases_load() -> list[str]:
    """Load the demo's model aliases once per database (a database whose demo configuration
    was loaded before they shipped gains them too); returns the names added.

    An alias whose name is already taken (by an alias or a provider), or none of whose
    providers is left, is passed over; once loaded, a deleted one stays deleted.
    """
    target_type = "providers.demo_aliases"
    if seeded(target_type):
        return []
    created: list[models.Model] = []
    for demo in DEMO_ALIASES:
        by_name = Provider.objects.in_bulk(demo.providers, field_name="name")
        providers = [by_name[name] for name in demo.providers if name in by_name]
        taken = (
            ModelAlias.objects.filter(name=demo.name).exists()
            or Provider.objects.filter(name=demo.name).exists()
        )
        if taken or not providers:
            continue
        alias = ModelAlias(name=demo.name, description=demo.description, then_cascade=True)
        alias.full_clean()
        alias.save()
        created.append(alias)
        for position, provider in enumerate(providers):
            entry = AliasEntry(alias=alias, provider=provider, position=position)
            entry.full_clean()
            entry.save()
            created.append(entry)
    demo_rows_recorded(target_type, "demo model aliases", created)
    return [row.name for row in created if isinstance(row, ModelAlias)]
