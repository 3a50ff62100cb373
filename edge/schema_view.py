"""A JSON Schema as a reader sees it: `schema_view` turns one into a frozen `Schema`, its type
in words, its description, allowed values, limits, nested fields, variants and conditions, for
the API reference (`edge/api_reference.py`, `templates/front/schema.html`). A `$ref` is
a link to the component's one rendering, never expanded again, so there are no cycles and no
copies. Keywords the reader needs no words for are still shown, as JSON: nothing is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

REF_PREFIX = "#/components/schemas/"
# Keywords `schema_view` reads itself; any other is shown as `keyword: JSON`.
_READ = {
    "type", "$ref", "description", "title", "properties", "required", "items", "anyOf",
    "oneOf", "allOf", "enum", "const", "default", "examples", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
    "minProperties", "maxProperties", "pattern", "format", "additionalProperties",
    "propertyNames", "contentMediaType", "contentSchema", "if", "then", "else", "not",
}  # fmt: skip
# Each limit's words, and the unit it counts (singular; "" for a number).
_LIMITS = (
    ("minimum", "at least", ""),
    ("exclusiveMinimum", "above", ""),
    ("maximum", "at most", ""),
    ("exclusiveMaximum", "below", ""),
    ("minLength", "at least", "character"),
    ("maxLength", "at most", "character"),
    ("minItems", "at least", "item"),
    ("maxItems", "at most", "item"),
    ("minProperties", "at least", "key"),
    ("maxProperties", "at most", "key"),
)
_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Segment:
    """A piece of a type's name: words, or a component's name linked to its rendering."""

    text: str
    ref: str = ""


@dataclass(frozen=True)
class Schema:
    label: tuple[Segment, ...]  # its type: "string or null", "array of Model"
    description: SafeString = mark_safe("")
    values: tuple[str, ...] = ()  # the allowed values (enum or const), as JSON
    facts: tuple[str, ...] = ()  # limits, default, pattern, examples, format
    fields: tuple[Field, ...] = ()  # an object's properties
    items: Schema | None = None  # an array's items, when there is more to them than a type
    variants: tuple[Schema, ...] = ()  # anyOf / oneOf: any one of these
    rules: tuple[Rule, ...] = ()  # conditions, what the content or other keys must be

    @property
    def brief(self) -> bool:
        """Said in one line: its type, values and facts, nothing nested."""
        return not (self.description or self.fields or self.items or self.variants or self.rules)

    @property
    def plain(self) -> bool:
        """Nothing to show past its type."""
        return self.brief and not (self.values or self.facts)

    @property
    def variants_brief(self) -> bool:
        """Its variants fit on one line."""
        return all(variant.brief for variant in self.variants)


@dataclass(frozen=True)
class Field:
    name: str
    required: bool
    schema: Schema


@dataclass(frozen=True)
class Rule:
    label: str  # "when role is "tool"", "otherwise", "each other key's value"
    schema: Schema


def prose(text: str) -> SafeString:
    """The document's text, escaped, with its `code` spans as <code>."""
    return mark_safe(_CODE.sub(r"<code>\1</code>", escape(text)))


def schema_anchor(name: str) -> str:
    return f"schema-{name}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _joined(labels: list[tuple[Segment, ...]]) -> tuple[Segment, ...]:
    unique = list(dict.fromkeys(labels))
    joined: list[Segment] = []
    for label in unique:
        if joined:
            joined.append(Segment(" or "))
        joined.extend(label)
    return tuple(joined)


def _value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _label(schema: dict[str, Any]) -> tuple[Segment, ...]:
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix(REF_PREFIX)
        return (Segment(name, schema_anchor(name)),)
    types = schema.get("type")
    if isinstance(types, str):
        types = [types]
    if not types:
        if "const" in schema:
            types = [_value_type(schema["const"])]
        elif "enum" in schema:
            types = list(dict.fromkeys(_value_type(value) for value in schema["enum"]))
        elif "properties" in schema:
            types = ["object"]
        elif "items" in schema:
            types = ["array"]
        elif variants := schema.get("anyOf") or schema.get("oneOf"):
            return _joined([_label(variant) for variant in variants])
        else:
            return ()
    labels: list[tuple[Segment, ...]] = []
    for name in types:
        if name == "array" and isinstance(schema.get("items"), dict):
            labels.append((Segment("array of "), *(_label(schema["items"]) or (Segment("any"),))))
        else:
            labels.append((Segment(name),))
    return _joined(labels)


def _plural(unit: str, count: Any) -> str:
    return unit if not unit or count == 1 else unit + "s"


def _facts(schema: dict[str, Any]) -> tuple[str, ...]:
    facts = [
        " ".join(filter(None, (words, _json(schema[key]), _plural(unit, schema[key]))))
        for key, words, unit in _LIMITS
        if key in schema
    ]
    if "pattern" in schema:
        # JSON's escapes make the pattern's control and space characters visible.
        facts.append(f"matches {json.dumps(schema['pattern'])[1:-1]}")
    if "format" in schema:
        facts.append(f"format {schema['format']}")
    if "default" in schema:
        facts.append(f"default {_json(schema['default'])}")
    if schema.get("examples"):
        facts.append("for example " + ", ".join(_json(e) for e in schema["examples"]))
    if schema.get("additionalProperties") is False:
        facts.append("no other fields")
    if "not" in schema:
        facts.append("not " + "".join(s.text for s in _label(schema["not"]) or [Segment("that")]))
    facts.extend(f"{key}: {_json(value)}" for key, value in schema.items() if key not in _READ)
    return tuple(facts)


def _values(schema: dict[str, Any]) -> tuple[str, ...]:
    if "const" in schema:
        return (_json(schema["const"]),)
    return tuple(_json(value) for value in schema.get("enum", ()))


def _condition(schema: dict[str, Any]) -> str:
    """An `if` schema in words, for the shapes the document uses; its JSON otherwise."""
    words = [f"{name} is given" for name in schema.get("required", ())]
    for name, sub in schema.get("properties", {}).items():
        if "const" in sub:
            words.append(f"{name} is {_json(sub['const'])}")
        elif sub.get("not") == {"type": "null"}:
            words.append(f"{name} is not null")
        elif isinstance(sub.get("type"), str):
            words.append(f"{name} is a{'n' if sub['type'][0] in 'aeiou' else ''} {sub['type']}")
        else:
            words.append(f"{name} matches {_json(sub)}")
    if "const" in schema:
        words.append(f"it is {_json(schema['const'])}")
    known = {"required", "properties", "const"}
    if not words or set(schema) - known:
        return f"it matches {_json(schema)}"
    return " and ".join(dict.fromkeys(words))


def _constraint(schema: dict[str, Any]) -> Schema:
    """A schema that narrows another (a condition's outcome, an allOf part): its type is said
    only if it gives one, not guessed from its keywords."""
    view = schema_view(schema)
    return view if "type" in schema or "$ref" in schema else replace(view, label=())


def _rules(schema: dict[str, Any]) -> tuple[Rule, ...]:
    rules: list[Rule] = []
    parts = [schema, *schema.get("allOf", ())]
    for index, part in enumerate(parts):
        if "if" in part:
            condition = _condition(part["if"])
            if "then" in part:
                rules.append(Rule(f"when {condition}", _constraint(part["then"])))
            if "else" in part:
                rules.append(Rule(f"unless {condition}", _constraint(part["else"])))
        elif index:  # an allOf part that is no condition: it holds as well
            rules.append(Rule("and also", _constraint(part)))
    if isinstance(schema.get("additionalProperties"), dict):
        rules.append(Rule("each other key's value", schema_view(schema["additionalProperties"])))
    if "propertyNames" in schema:
        rules.append(Rule("each key", schema_view(schema["propertyNames"])))
    if "contentSchema" in schema:
        media = schema.get("contentMediaType", "its content")
        rules.append(Rule(f"parsed as {media}", schema_view(schema["contentSchema"])))
    elif "contentMediaType" in schema:
        rules.append(Rule(f"content {schema['contentMediaType']}", Schema(label=())))
    return tuple(rules)


def schema_view(schema: dict[str, Any]) -> Schema:
    """One JSON Schema as the reference shows it; a `$ref` is its link only."""
    if "$ref" in schema:
        return Schema(label=_label(schema), description=prose(schema.get("description", "")))
    required = set(schema.get("required", ()))
    fields = tuple(
        Field(name, name in required, schema_view(sub))
        for name, sub in schema.get("properties", {}).items()
    )
    # A required name with no property of its own (a condition's `then` often has them).
    fields += tuple(
        Field(name, True, Schema(label=()))
        for name in schema.get("required", ())
        if name not in schema.get("properties", {})
    )
    items = schema.get("items")
    item_view = schema_view(items) if isinstance(items, dict) else None
    variants = tuple(schema_view(v) for v in [*schema.get("anyOf", ()), *schema.get("oneOf", ())])
    label = _label(schema)
    # Variants that are a bare type each, when the label already names them all ("A or B").
    if all(v.plain for v in variants) and label == _joined([v.label for v in variants]):
        variants = ()
    return Schema(
        label=label,
        description=prose(schema.get("description", schema.get("title", ""))),
        values=_values(schema),
        facts=_facts(schema),
        fields=fields,
        items=None if item_view is None or item_view.plain else item_view,
        variants=variants,
        rules=_rules(schema),
    )


def any_view() -> Schema:
    return Schema(label=(Segment("any"),))
