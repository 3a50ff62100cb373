"""Reads of the control plane: the policy row, and the snapshot the engine routes on (its
providers, model aliases, static answers and client apps; the budgets are billing's, read by
the runtime (`runtime.snapshots.budget_configs`) and handed in)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from django.db.models import Count, Max

from gateway.engine.clients import ClientConfig, Clients
from gateway.engine.config import (
    AliasConfig,
    BudgetConfig,
    PolicyConfig,
    ProviderConfig,
    Snapshot,
)
from gateway.engine.faq import FaqEntry, FaqIndex
from providers.models import (
    ClientApp,
    ConfigChange,
    FailoverPolicy,
    ModelAlias,
    Provider,
    StaticAnswer,
)
from providers.models.client_app import lines_of, origins_normalised
from providers.models.provider import model_names
from providers.models.secret_env import secret_env_read, secret_values


def policy_get() -> FailoverPolicy:
    """The one policy row, created with the defaults on first read."""
    policy, _ = FailoverPolicy.objects.get_or_create(pk=FailoverPolicy.SINGLETON_ID)
    return policy


def policy_config(row: FailoverPolicy, *, forced_provider: str) -> PolicyConfig:
    """The policy as the engine reads it: every `PolicyConfig` field from the model field of
    the same name, so a new threshold needs no line here. Only the values the engine holds in
    another shape are converted: the task lists as sets, the forced provider by name."""
    converted: dict[str, Any] = {
        "kill_switch_provider": forced_provider,
        "local_only_tasks": frozenset(FailoverPolicy.task_list(row.local_only_tasks)),
        "no_fallback_tasks": frozenset(FailoverPolicy.task_list(row.no_fallback_tasks)),
        "anonymous_origins": origins_normalised(row.anonymous_origins),
    }
    values: dict[str, Any] = {
        item.name: converted[item.name] if item.name in converted else getattr(row, item.name)
        for item in fields(PolicyConfig)
    }
    return PolicyConfig(**values)


def snapshot_build(*, version: int, budgets: tuple[BudgetConfig, ...]) -> Snapshot:
    """The control plane as the engine reads it, with billing's `budgets` (sync: call it off
    the event loop)."""
    policy_row = policy_get()
    forced = ""
    if policy_row.kill_switch_provider_id is not None:
        forced = (
            Provider.objects.filter(pk=policy_row.kill_switch_provider_id)
            .values_list("name", flat=True)
            .first()
            or ""
        )
    policy = policy_config(policy_row, forced_provider=forced)
    secrets = secret_values()
    providers = tuple(
        provider_config(row, other_secrets=secrets)
        for row in Provider.objects.filter(enabled=True).order_by("priority", "name")
    )
    return Snapshot(
        version=version,
        providers=providers,
        policy=policy,
        budgets=budgets,
        faq=faq_index_build(),
        clients=clients_build(),
        aliases=aliases_build(providers),
    )


def aliases_build(providers: tuple[ProviderConfig, ...]) -> tuple[AliasConfig, ...]:
    """The enabled aliases, each entry as (provider, upstream model), a blank model read as
    the provider's own. An entry whose provider is disabled is left out, and so is one whose
    model its provider no longer serves (its model or chat models were edited since): a call
    could only be refused, and would count against the provider's breaker for everyone."""
    enabled = {provider.name: provider for provider in providers}
    aliases = []
    for row in ModelAlias.objects.filter(enabled=True).prefetch_related("entries__provider"):
        entries: list[tuple[str, str]] = []
        for entry in row.entries.all():
            provider = enabled.get(entry.provider.name)
            if provider is None:
                continue
            model = entry.model or provider.model
            pair = (provider.name, model)
            if (model == provider.model or model in provider.chat_models) and pair not in entries:
                entries.append(pair)
        aliases.append(AliasConfig(row.name, tuple(entries), row.then_cascade))
    return tuple(aliases)


def clients_build(*, digest: str | None = None) -> Clients:
    """The client apps as the API checks them: the usable ones by key digest, and the digests
    of the disabled and revoked ones, whose refusal says so. With `digest`, only the app with
    that key digest (one indexed query; nothing when there is none): a key the snapshot doesn't
    know yet, judged by the snapshot's own rule."""
    usable: dict[str, ClientConfig] = {}
    refused: set[str] = set()
    rows = (
        ClientApp.objects.all() if digest is None else ClientApp.objects.filter(key_digest=digest)
    )
    for row in rows:
        if not row.usable:
            refused.add(row.key_digest)
            continue
        usable[row.key_digest] = ClientConfig(
            name=row.name,
            key_prefix=row.key_prefix,
            requests_per_minute=row.requests_per_minute,
            tokens_per_minute=row.tokens_per_minute,
            allowed_origins=origins_normalised(row.allowed_origins),
            allow_cloud=row.allow_cloud,
            allowed_models=frozenset(lines_of(row.allowed_models)),
            allow_high_priority=row.allow_high_priority,
            can_read_status=row.can_read_status,
            stand_ins=row.stand_ins,
            shared_answer_cache=row.shared_answer_cache,
        )
    return Clients(by_digest=usable, refused=frozenset(refused))


def provider_config(row: Provider, *, other_secrets: tuple[str, ...] = ()) -> ProviderConfig:
    """A provider as the engine reads it, with its key read from the environment now (once per
    snapshot). A key variable the secret-variable rule refuses, or one not bound to the base
    URL's host, reads as not set whatever it holds (`providers/models/secret_env.py`), and
    `api_key_problem` says why."""
    api_key, problem = (
        secret_env_read(row.api_key_env, row.base_url) if row.api_key_env else ("", "")
    )
    return ProviderConfig(
        name=row.name,
        kind=row.kind,
        base_url=row.base_url,
        model=row.model,
        priority=row.priority,
        is_local=row.is_local,
        timeout_s=row.timeout_s,
        context_window=row.context_window,
        weight=row.weight,
        max_in_flight=row.max_in_flight,
        chat_models=model_names(row.chat_models),
        embedding_models=model_names(row.embedding_models),
        api_version=row.api_version,
        think=row.think,
        keep_alive=row.keep_alive,
        tools=row.supports_tools,
        thinks=row.supports_thinking,
        images=row.supports_images,
        json_output=row.supports_json_output,
        token_limit_field=row.token_limit_field,
        price_input_per_1m=row.price_input_per_1m,
        price_output_per_1m=row.price_output_per_1m,
        api_key=api_key,
        api_key_env=row.api_key_env,
        api_key_problem=problem,
        other_secrets=other_secrets,
    )


def faq_index_build() -> FaqIndex:
    """The static tier's index over the enabled answers as they are in the database now."""
    return FaqIndex(
        tuple(
            FaqEntry(answer_id=row.pk, answer=row.answer, phrasings=tuple(row.phrasings))
            for row in StaticAnswer.objects.filter(enabled=True).order_by("pk")
        )
    )


def config_change_high_water() -> tuple[int, int]:
    """Where the change record stands: (the highest `ConfigChange` id, how many there are).
    Every committed control-plane write adds a row, so this moves with every change committed
    by any process. The count is there because on PostgreSQL a change can commit after one
    with a higher id (SQLite has one writer at a time, so its ids commit in order)."""
    stand = ConfigChange.objects.aggregate(last=Max("id"), count=Count("id"))
    return (stand["last"] or 0, stand["count"])
