"""The record every control-plane write leaves: one `ConfigChange` with who, what, before and
after, written in the write's own transaction, and the config version moved once it commits."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from providers.models import ChangeAction, ConfigChange
from providers.signals import config_committed_send

# Bookkeeping fields that move on every save; a change record lists what an operator changed.
# A client key's digest stays out of the record too: the record is for reading, the digest
# only for checking keys.
_NOT_AUDITED = frozenset(
    {"created_at", "updated_at", "updated_by", "hit_count", "last_hit_at", "key_digest"}
)

Actor = AbstractBaseUser | AnonymousUser | None


class RecordChange(Protocol):
    def __call__(
        self,
        *,
        row: models.Model,
        before: dict[str, Any] | None,
        after: dict[str, Any],
        actor: Actor,
    ) -> None: ...


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
    transaction.on_commit(config_committed_send)
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


@transaction.atomic
def row_save(
    *, row: models.Model, actor: Actor, record: RecordChange | None = None
) -> models.Model:
    """Save an operator's new or edited row (an admin form's instance, its values already set)
    and record what moved, in one transaction. `record` replaces the plain create/update record
    for a model whose changes are recorded in its own way (the policy's kill switch)."""
    manager = type(row)._default_manager
    stored = manager.filter(pk=row.pk).first() if row.pk is not None else None
    before = instance_snapshot(stored) if stored is not None else None
    row.save()
    (record or record_row_change)(row=row, before=before, after=instance_snapshot(row), actor=actor)
    return row


@transaction.atomic
def rows_delete(*, rows: Iterable[models.Model], actor: Actor) -> int:
    """Delete rows an operator chose, each recorded with its values, in one transaction."""
    deleted = 0
    for row in rows:
        config_change_record(
            target=row,
            action=ChangeAction.DELETE,
            before=instance_snapshot(row),
            after=None,
            actor=actor,
        )
        row.delete()
        deleted += 1
    return deleted


def record_row_change(
    *, row: models.Model, before: dict[str, Any] | None, after: dict[str, Any], actor: Actor
) -> None:
    config_change_record(
        target=row,
        action=ChangeAction.CREATE if before is None else ChangeAction.UPDATE,
        before=before,
        after=after,
        actor=actor,
    )
