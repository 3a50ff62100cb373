"""The configuration as a file: what `manage.py config export` writes and `config apply` reads.

One document holds every row an operator sets up: the policy, the providers, the model aliases
(with their entries), the static answers, the client apps, the budgets and the alert channels.
Each row is named by what an operator calls it (a provider by its name, a static answer by its
question, a budget by what it caps), never by a database id, so a file moves between
deployments. What a file never holds: a client app's key (a new app gets one on its first
apply, printed once) and any secret (providers and alert channels name the environment
variables that hold theirs). Bookkeeping (hit counts, timestamps, a channel's last error) stays
with the database it happened in.

Applying a file (`failover_site.config_apply`) is one transaction through the audited writes
(`providers.services`): every
row it creates, changes or (with `prune`) deletes leaves its change record, marked as applied
from the file, and moves the config version once, at commit, so every serving process picks it
up as it picks up an admin edit. A row that doesn't validate stops the whole apply with the row
and the field named; nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import models

from alerts.models import AlertChannel
from billing.models import Budget
from providers.models import (
    AliasEntry,
    ClientApp,
    FailoverPolicy,
    ModelAlias,
    Provider,
    StaticAnswer,
)
from providers.selectors import policy_get

FORMAT_VERSION = 1


class ConfigFileError(Exception):
    """A file that can't be applied: which row, which field, and why."""


@dataclass(frozen=True)
class Kind:
    """One section of the file: its rows' model and what names a row."""

    section: str
    model: type[models.Model]
    key: tuple[str, ...]  # the fields that name a row, in the file and in messages
    # Rows of this kind that the file leaves out (a revoked client app can never serve again).
    exported: Callable[[models.QuerySet[Any]], models.QuerySet[Any]] = lambda rows: rows


KINDS: tuple[Kind, ...] = (
    Kind("providers", Provider, ("name",)),
    Kind("aliases", ModelAlias, ("name",)),
    Kind("static_answers", StaticAnswer, ("question",)),
    Kind(
        "client_apps",
        ClientApp,
        ("name",),
        exported=lambda rows: rows.filter(revoked_at__isnull=True),
    ),
    Kind("budgets", Budget, ("scope", "provider", "client_app", "period", "unit")),
    Kind("alert_channels", AlertChannel, ("name",)),
)
# References by name: a foreign key in the file is its row's name.
NAMED_BY = {Provider: "name", ClientApp: "name"}


# The kill switch is an incident's control, not configuration: a file from staging must never
# flip production's. It stays with the deployment (the status page, with its own permission).
NOT_IN_FILE: dict[type[models.Model], frozenset[str]] = {
    FailoverPolicy: frozenset(FailoverPolicy.KILL_SWITCH_FIELDS)
}


def editable_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """What an operator sets: the editable columns, not the id, not bookkeeping, and not the
    kill switch."""
    left_out = NOT_IN_FILE.get(model, frozenset())
    return [
        f
        for f in model._meta.concrete_fields
        if f.editable and not f.primary_key and f.name not in left_out
    ]


def related_model(f: Any) -> type[models.Model]:
    """The model a reference column points at (only those of `NAMED_BY` are in the file)."""
    target = f.related_model
    assert isinstance(target, type) and target in NAMED_BY, f"{f} refers to no named row"
    return target


def _plain(value: Any) -> Any:
    """A value as the file writes it: decimals as text (exact), the rest as JSON has it."""
    if isinstance(value, Decimal):
        return str(value)
    return value


def row_values(instance: models.Model) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in editable_fields(type(instance)):
        if f.is_relation:
            target = getattr(instance, f.name)
            out[f.name] = None if target is None else getattr(target, NAMED_BY[related_model(f)])
        else:
            out[f.name] = _plain(f.value_from_object(instance))
    return out


def config_export() -> dict[str, Any]:
    """The whole configuration as one JSON-safe document, in a stable order."""
    doc: dict[str, Any] = {"version": FORMAT_VERSION, "policy": row_values(policy_get())}
    for kind in KINDS:
        rows = kind.exported(kind.model._default_manager.all()).order_by(
            *[f"{name}__name" if _is_ref(kind.model, name) else name for name in kind.key], "pk"
        )
        items = []
        for instance in rows:
            item = row_values(instance)
            if isinstance(instance, ModelAlias):
                item["entries"] = alias_entries(instance)
            items.append(item)
        doc[kind.section] = items
    return doc


def _is_ref(model: type[models.Model], name: str) -> bool:
    return model._meta.get_field(name).is_relation


def alias_entries(alias: ModelAlias) -> list[dict[str, Any]]:
    """An alias's entries as the file lists them: each provider by name, in their order."""
    return [
        {"provider": e.provider.name, "model": e.model, "position": e.position}
        for e in AliasEntry.objects.filter(alias=alias)
        .select_related("provider")
        .order_by("position", "pk")
    ]
