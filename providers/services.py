"""Writes to the control plane. Views, admin actions and commands call these; each important
write is one function, and every one of them leaves a `ConfigChange` behind."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from .models import ChangeAction, ConfigChange, Provider, ProviderKind, StaticAnswer

DEFAULT_ANSWERS_FILE = Path(__file__).resolve().parent / "data" / "static_answers.json"

# Bookkeeping fields that move on every save; a change record lists what an operator changed.
_NOT_AUDITED = frozenset({"created_at", "updated_at", "updated_by", "hit_count", "last_hit_at"})

Actor = AbstractBaseUser | AnonymousUser | None


def instance_snapshot(instance: models.Model) -> dict[str, Any]:
    """The audited fields of a row as JSON-safe values (foreign keys by id)."""
    values = {
        field.attname: field.value_from_object(instance)
        for field in instance._meta.concrete_fields
        if field.name not in _NOT_AUDITED
    }
    return json.loads(json.dumps(values, cls=DjangoJSONEncoder))


def _actor_fields(actor: Actor, actor_name: str) -> dict[str, Any]:
    if actor is not None and actor.is_authenticated:
        return {"actor": actor, "actor_name": actor_name or actor.get_username()}
    return {"actor": None, "actor_name": actor_name or "system"}


def config_change_record(
    *,
    target: models.Model,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    actor: Actor = None,
    actor_name: str = "",
    reason: str = "",
) -> ConfigChange | None:
    """Record one change to a row. An update keeps only the fields that moved; an update that
    moved nothing records nothing and returns None."""
    if action == ChangeAction.UPDATE and before is not None and after is not None:
        moved = [key for key in after if before.get(key) != after[key]]
        if not moved:
            return None
        before = {key: before.get(key) for key in moved}
        after = {key: after[key] for key in moved}
    # Every serving process swaps in the new configuration once this change is committed.
    transaction.on_commit(_config_changed)
    return ConfigChange.objects.create(
        **_actor_fields(actor, actor_name),
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk) if target.pk is not None else "",
        target_repr=str(target)[:300],
        before=before,
        after=after,
        reason=reason,
    )


def _config_changed() -> None:
    from .gateway import config_changed

    config_changed()


def _seeded(target_type: str) -> bool:
    return ConfigChange.objects.filter(action=ChangeAction.SEED, target_type=target_type).exists()


@transaction.atomic
def static_answers_load_defaults(*, path: Path = DEFAULT_ANSWERS_FILE) -> int:
    """Load the shipped FAQ answers once per database; returns how many were added.

    Once loaded (a SEED change is on record), answers an operator deleted stay deleted.
    """
    target_type = StaticAnswer._meta.label_lower
    if _seeded(target_type):
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
    transaction.on_commit(_config_changed)
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
        "price_input_per_1m": Decimal("0.15"),
        "price_output_per_1m": Decimal("0.60"),
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
        "price_input_per_1m": Decimal("0.80"),
        "price_output_per_1m": Decimal("4.00"),
    },
)


@transaction.atomic
def demo_configuration_load() -> bool:
    """Load the demo providers and budgets once per database; False when already loaded.

    The primary is a local Ollama, the secondary OpenAI's gpt-4o-mini (key from OPENAI_API_KEY),
    Anthropic is present but disabled; budgets keep a demo's cloud spend small.
    """
    from billing.models import Budget, BudgetPeriod, BudgetScope

    target_type = "providers.demo_configuration"
    if _seeded(target_type):
        return False
    created: list[models.Model] = []
    for values in DEMO_PROVIDERS:
        if not Provider.objects.filter(name=values["name"]).exists():
            provider = Provider(**values)
            provider.full_clean()
            provider.save()
            created.append(provider)
    openai_provider = Provider.objects.get(name="openai-cloud")
    budgets = [
        Budget(scope=BudgetScope.ALL, period=BudgetPeriod.DAY, cap=Decimal("5")),
        Budget(scope=BudgetScope.ALL, period=BudgetPeriod.MONTH, cap=Decimal("100")),
        Budget(
            scope=BudgetScope.PROVIDER,
            provider=openai_provider,
            period=BudgetPeriod.DAY,
            cap=Decimal("3"),
        ),
    ]
    for budget in budgets:
        taken = Budget.objects.filter(
            scope=budget.scope, provider=budget.provider, client="", period=budget.period
        ).exists()
        if not taken:
            budget.full_clean()
            budget.save()
            created.append(budget)
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
        target_repr="demo configuration",
        after={"created": [str(row) for row in created]},
    )
    return True
