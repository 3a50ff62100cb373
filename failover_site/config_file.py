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

Reading a file (`config_read`) holds it to what a configuration needs before anything of it is
built: at most MAX_FILE_BYTES, MAX_DEPTH levels of nesting and MAX_VALUES values, and in YAML
no anchor, alias or tag. A file past them is refused whole, as a row that doesn't validate is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml
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

# What a file may be. The demo's file is 30 KB, and 50 static answers each at its longest
# (question, phrasings, answer) take under 1 MiB; 4 MiB holds a few hundred such answers and
# stays a few seconds' work for the pure-Python YAML reader (about a second a MiB).
MAX_FILE_BYTES = 4 * 1024 * 1024
# The file's own nesting is five levels (the document, a section, a row, an alias's entries, an
# entry); an alert channel's config adds a level or two.
MAX_DEPTH = 32
# Each key, value, list and object counts one: the demo's file holds about 850, and a static
# answer 9. The YAML reader spends some 30 µs and 700 bytes on each, so this bounds a file of
# tiny values (`[0,0,0,…]`) to a second or two and some 35 MB, with room for 5,000 answers.
MAX_VALUES = 50_000


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


def config_read(data: bytes) -> Any:
    """The document a file holds, read as JSON when it is JSON and as YAML otherwise. Raises
    ConfigFileError, before anything of it is built, for a file past MAX_FILE_BYTES, nested past
    MAX_DEPTH or holding more than MAX_VALUES values, for YAML with an anchor, an alias or a tag
    (a few hundred bytes of aliases expand to gigabytes; no configuration needs one), and for
    what isn't UTF-8, JSON or YAML."""
    if len(data) > MAX_FILE_BYTES:
        raise ConfigFileError(
            f"larger than {MAX_FILE_BYTES // 2**20} MiB, the most a configuration file holds."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"not UTF-8 text (at byte {exc.start}).") from None
    try:
        # JSON as JSON: a YAML reader takes the escaped pair "\ud83d\ude00" for two halves
        # of a character, not the one character it is.
        doc = json.loads(text)
    except json.JSONDecodeError:
        return _yaml_read(text)
    except RecursionError:
        raise ConfigFileError(f"nested deeper than {MAX_DEPTH} levels.") from None
    except ValueError:  # past Python's limit on an integer's digits
        raise ConfigFileError(
            f"a number of more than {sys.get_int_max_str_digits():,} digits."
        ) from None
    _bounded(doc)
    return doc


def _yaml_read(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigFileError(f"not YAML or JSON: {at}{exc.problem or exc.context}.") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a date or a number out of range
        first = next(iter(str(exc).splitlines()), type(exc).__name__)
        raise ConfigFileError(f"not YAML or JSON: {first}.") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing as it composes, before a value is built, what no
    configuration holds: an anchor or alias, a tag (its constructors fail in ways of their
    own), nesting past MAX_DEPTH (Python's recursion limit would end it otherwise) and more
    than MAX_VALUES values. The C loader composes out of reach of these hooks."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.values = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        at = f"line {event.start_mark.line + 1}: " if event.start_mark else ""
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ConfigFileError(
                f"{at}an anchor or alias (&name, *name): a configuration file has none; "
                "write each value out."
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise ConfigFileError(f"{at}a tag ({tag}): a configuration file has none.")
        self.values += 1
        if self.values > MAX_VALUES:
            raise ConfigFileError(f"{at}more than {MAX_VALUES:,} values.")
        nests = 1 if isinstance(event, yaml.CollectionStartEvent) else 0
        self.depth += nests
        if self.depth > MAX_DEPTH:
            raise ConfigFileError(f"{at}nested deeper than {MAX_DEPTH} levels.")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nests


def _bounded(doc: Any) -> None:
    """A JSON document held to the YAML reader's limits, counted alike (it has no aliases)."""
    values = 0
    todo: list[tuple[Any, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        values += 1
        if isinstance(value, dict):
            values += len(value)  # its keys
            value = list(value.values())
        if isinstance(value, list):
            if depth > MAX_DEPTH:
                raise ConfigFileError(f"nested deeper than {MAX_DEPTH} levels.")
            todo.extend((item, depth + 1) for item in value)
        if values > MAX_VALUES:
            raise ConfigFileError(f"more than {MAX_VALUES:,} values.")
