"""Applying a configuration file (`failover_site.config_file`): one transaction through the
audited writes, every change recorded as applied from the file; with a dry run, rolled back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import models, transaction

from failover_site.config_file import (
    FORMAT_VERSION,
    KINDS,
    NAMED_BY,
    NOT_IN_FILE,
    ConfigFileError,
    Kind,
    alias_entries,
    editable_fields,
    related_model,
    row_values,
)
from providers.models import AliasEntry, ChangeAction, ClientApp, ModelAlias, Provider
from providers.selectors import policy_get
from providers.services.audit import config_change_record, instance_snapshot, row_save
from providers.services.client_apps import client_app_create, client_app_revoke


@dataclass
class Change:
    """One row the file creates, changes or deletes, with the fields that move."""

    section: str
    name: str
    action: str  # "create", "update", "delete"
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # name -> (before, after)


@dataclass
class Applied:
    changes: list[Change]
    keys: dict[str, str]  # a new client app's name -> its key, made by this apply


# Text a database can't hold as written: PostgreSQL refuses a NUL in text, and a lone surrogate
# (what an escape such as "\ud800" makes) is no character, so it has no UTF-8 to store.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _text_checked(value: Any, where: str) -> None:
    """Refuses, naming where, a string of `value` (its names too, at any depth) that holds
    text the database can't store, and a name that isn't text."""
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        if found:
            char = found.group()
            what = "a NUL character" if char == "\x00" else "a lone surrogate"
            raise ConfigFileError(
                f"{where}: holds {what} ({char.encode('unicode_escape').decode()}), which "
                "the database can't store as text."
            )
    elif isinstance(value, Mapping):
        for name, item in value.items():
            if not isinstance(name, str):
                raise ConfigFileError(f"{where}: {name!r}: a field's name is text.")
            _text_checked(name, f"{where}: field {name!r}")
            _text_checked(item, f"{where}: {name}")
    elif isinstance(value, list):
        for place, item in enumerate(value):
            _text_checked(item, f"{where}[{place}]")


def _file_text_checked(doc: Mapping[Any, Any]) -> None:
    """Every string of the file storable, checked before any of it is looked up or written,
    each named by its row and field."""
    kinds = {kind.section: kind for kind in KINDS}
    for section, rows in doc.items():
        if not isinstance(section, str):
            raise ConfigFileError(f"section {section!r}: a section's name is text.")
        _text_checked(section, f"section {section!r}")
        kind = kinds.get(section)
        if kind is None or not isinstance(rows, list):
            _text_checked(rows, section)
            continue
        for place, item in enumerate(rows):
            if isinstance(item, Mapping):
                where = _label(section, {name: item.get(name) for name in kind.key})
            else:
                where = f"{section}[{place}]"
            _text_checked(item, where)


def _label(kind: str, key: Mapping[str, Any]) -> str:
    return kind + " " + ", ".join(f"{k}={v!r}" for k, v in key.items() if v not in (None, ""))


def _reference(model: type[models.Model], name: Any, where: str, column: str) -> Any:
    if name in (None, ""):
        return None
    try:
        return model._default_manager.get(**{NAMED_BY[model]: name})
    except ObjectDoesNotExist:
        raise ConfigFileError(
            f"{where}: {column} names {name!r}, which is not a {model._meta.verbose_name} in "
            "this file or this database."
        ) from None


def _assign(instance: models.Model, item: Mapping[str, Any], where: str) -> None:
    """The file's values onto `instance`, each through its field's own conversion; a column
    the file doesn't name keeps its value (a new row: its default)."""
    known = {f.name: f for f in editable_fields(type(instance))}
    switch = sorted(set(item) & NOT_IN_FILE.get(type(instance), frozenset()))
    if switch:
        raise ConfigFileError(
            f"{where}: {', '.join(switch)}: the kill switch is not configuration and no file "
            "sets it; flip it on the status page."
        )
    unknown = sorted(set(item) - set(known) - {"entries"})
    if unknown:
        raise ConfigFileError(f"{where}: no such field: {', '.join(unknown)}.")
    for name, value in item.items():
        if name == "entries":
            continue
        f = known[name]
        if f.is_relation:
            setattr(instance, name, _reference(related_model(f), value, where, name))
            continue
        try:
            setattr(instance, f.attname, f.to_python(value))
        except ValidationError as exc:
            raise ConfigFileError(f"{where}: {name}: {'; '.join(exc.messages)}") from None


def _validated(instance: models.Model, where: str) -> None:
    try:
        instance.full_clean()
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}: {' '.join(messages)}" for name, messages in exc.message_dict.items()
        )
        raise ConfigFileError(f"{where}: {problems}") from None


def _moved(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: ((before or {}).get(name), value)
        for name, value in after.items()
        if before is None or before.get(name) != value
    }


def _find(kind: Kind, key: Mapping[str, Any], where: str) -> models.Model | None:
    lookup: dict[str, Any] = {}
    for name in kind.key:
        f = kind.model._meta.get_field(name)
        if f.is_relation:
            lookup[name] = _reference(related_model(f), key.get(name), where, name)
        else:
            lookup[name] = key.get(name)
    return kind.model._default_manager.filter(**lookup).order_by("pk").first()


def config_apply(
    doc: Mapping[str, Any], *, source: str, prune: bool = False, dry_run: bool = False
) -> Applied:
    """Make the database hold what `doc` says, in one transaction (rolled back when
    `dry_run`): each change recorded as applied from `source`. Raises ConfigFileError, and
    writes nothing, when a row doesn't validate, a name refers to nothing or a string holds
    what the database can't store as text (a NUL, a lone surrogate)."""
    if not isinstance(doc, Mapping) or doc.get("version") != FORMAT_VERSION:
        raise ConfigFileError(
            f"not a configuration file of this format (version {FORMAT_VERSION} expected)."
        )
    _file_text_checked(doc)
    sections = {"version", "policy", *(kind.section for kind in KINDS)}
    unknown = sorted(set(doc) - sections)
    if unknown:
        raise ConfigFileError(f"no such section: {', '.join(unknown)}.")
    reason = f"applied from {source}"[:300]
    applied = Applied(changes=[], keys={})

    def record(*, row: models.Model, before: Any, after: Any, actor: Any) -> None:
        _recorded(row, before, after, reason)

    with transaction.atomic():
        if "policy" in doc:
            _apply_policy(doc["policy"], applied, record)
        kept = {
            kind.section: _apply_kind(kind, doc[kind.section], applied, record, reason)
            for kind in KINDS
            if kind.section in doc
        }
        if prune:
            # What refers to a row goes before it (a budget before its provider).
            for kind in reversed(KINDS):
                if kind.section in kept:
                    _prune(kind, kept[kind.section], applied, reason)
        if dry_run:
            transaction.set_rollback(True)
            applied.keys = {}
    return applied


def _apply_policy(item: Any, applied: Applied, record: Any) -> None:
    if not isinstance(item, Mapping):
        raise ConfigFileError("policy: expected an object of fields.")
    policy = policy_get()
    before = row_values(policy)
    _assign(policy, item, "policy")
    _validated(policy, "policy")
    after = row_values(policy)
    moved = _moved(before, after)
    if moved:
        row_save(row=policy, actor=None, record=record)
        applied.changes.append(Change("policy", "policy", "update", moved))


def _apply_kind(kind: Kind, items: Any, applied: Applied, record: Any, reason: str) -> set[Any]:
    """Create or update each of the section's rows; answers the ids of the rows it names."""
    if not isinstance(items, list):
        raise ConfigFileError(f"{kind.section}: expected a list of rows.")
    kept: set[Any] = set()
    for place, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ConfigFileError(f"{kind.section}[{place}]: expected an object of fields.")
        key = {name: item.get(name) for name in kind.key}
        where = _label(kind.section, key)
        instance = _find(kind, key, where)
        if isinstance(instance, ClientApp) and instance.revoked_at is not None:
            raise ConfigFileError(
                f"{where}: revoked in this database; a revoked app's name is not used again."
            )
        before = row_values(instance) if instance is not None else None
        if before is not None and isinstance(instance, ModelAlias):
            before["entries"] = alias_entries(instance)
        target = instance if instance is not None else kind.model()
        _assign(target, item, where)
        _validated(target, where)
        after = row_values(target)
        if kind.model is ModelAlias:
            after["entries"] = _entries_in(item.get("entries", []), where)
        moved = _moved(before, after)
        if instance is None and isinstance(target, ClientApp):
            target, key_made = client_app_create(
                actor=None, app=target, reason=f"{reason}; key made"
            )
            applied.keys[target.name] = key_made
        elif moved:
            row_save(row=target, actor=None, record=record)
        if isinstance(target, ModelAlias) and "entries" in moved:
            _entries_set(target, after["entries"], where, reason)
        if moved or instance is None:
            action = "create" if instance is None else "update"
            applied.changes.append(Change(kind.section, where, action, moved))
        kept.add(target.pk)
    return kept


def _entries_in(entries: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ConfigFileError(f"{where}: entries: expected a list of objects.")
    out = []
    for place, entry in enumerate(entries):
        unknown = sorted(set(entry) - {"provider", "model", "position"})
        if unknown:
            raise ConfigFileError(
                f"{where}: entries[{place}]: no such field: {', '.join(unknown)}."
            )
        _reference(Provider, entry.get("provider"), f"{where}: entries[{place}]", "provider")
        position = entry.get("position", place)
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise ConfigFileError(f"{where}: entries[{place}]: position: a whole number ≥ 0.")
        out.append(
            {
                "provider": entry.get("provider"),
                "model": entry.get("model") or "",
                "position": position,
            }
        )
    return sorted(out, key=lambda e: e["position"])


def _entries_set(alias: ModelAlias, entries: list[dict[str, Any]], where: str, reason: str) -> None:
    """The alias's entries replaced by the file's, each one audited like an admin inline."""
    for old in AliasEntry.objects.filter(alias=alias):
        _deleted(old, reason)
    for entry in entries:
        row = AliasEntry(
            alias=alias,
            provider=Provider.objects.get(name=entry["provider"]),
            model=entry["model"],
            position=entry["position"],
        )
        _validated(row, f"{where}: entry {entry['provider']}")
        row.save()
        _recorded(row, None, instance_snapshot(row), reason)


def _prune(kind: Kind, kept: set[Any], applied: Applied, reason: str) -> None:
    """Each row of the section the file doesn't name goes, recorded; a client app's key is
    revoked rather than its row deleted (its ledger and its budgets keep their subject)."""
    gone = kind.exported(kind.model._default_manager.exclude(pk__in=kept)).order_by("pk")
    for row in gone:
        where = _label(kind.section, {name: _keyname(getattr(row, name)) for name in kind.key})
        applied.changes.append(Change(kind.section, where, "delete"))
        if isinstance(row, ClientApp):
            client_app_revoke(app=row, actor=None, reason=f"{reason}; not in the file")
        else:
            _deleted(row, reason)


def _recorded(row: models.Model, before: Any, after: Any, reason: str) -> None:
    """The change record of a row the file creates (no `before`), changes or deletes (no
    `after`), marked as applied from it."""
    if before is None:
        action = ChangeAction.CREATE
    else:
        action = ChangeAction.DELETE if after is None else ChangeAction.UPDATE
    config_change_record(
        target=row,
        action=action,
        before=before,
        after=after,
        actor_name="config apply",
        reason=reason,
    )


def _deleted(row: models.Model, reason: str) -> None:
    _recorded(row, instance_snapshot(row), None, reason)
    row.delete()


def _keyname(value: Any) -> Any:
    return getattr(value, "name", value)


def changes_text(changes: Iterable[Change]) -> str:
    """The diff as an operator reads it: one line a row, one indented line a field."""
    lines = []
    marks = {"create": "+", "update": "~", "delete": "-"}
    for change in changes:
        lines.append(f"{marks[change.action]} {change.name}")
        for name, (before, after) in change.fields.items():
            if change.action == "create":
                lines.append(f"    {name}: {json.dumps(after, default=str)}")
            else:
                lines.append(
                    f"    {name}: {json.dumps(before, default=str)} → "
                    f"{json.dumps(after, default=str)}"
                )
    return "\n".join(lines)
