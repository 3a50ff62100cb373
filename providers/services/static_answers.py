"""Writes to the static answers from the control room's workbench."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from providers.models import ChangeAction, StaticAnswer
from providers.services.audit import Actor, config_change_record, instance_snapshot

EDITABLE_FIELDS = ("question", "alternative_phrasings", "answer", "enabled")


def static_answer_update(
    *, answer: StaticAnswer, values: dict[str, Any], actor: Actor
) -> StaticAnswer:
    """Change an answer's editable fields and record it, in one transaction; the record moves
    the config version on commit, so every serving process answers with the new text.

    Raises ValidationError (by field, from the model's full_clean) and saves nothing when the
    result doesn't hold. An edit that changes nothing writes nothing."""
    with transaction.atomic():
        row = StaticAnswer.objects.select_for_update().get(pk=answer.pk)
        before = instance_snapshot(row)
        for name in EDITABLE_FIELDS:
            setattr(row, name, values[name])
        row.full_clean()
        if instance_snapshot(row) == before:
            return row
        if actor is not None and actor.is_authenticated:
            row.updated_by = actor  # type: ignore[assignment]
        row.save()
        config_change_record(
            target=row,
            action=ChangeAction.UPDATE,
            before=before,
            after=instance_snapshot(row),
            actor=actor,
        )
    return row
