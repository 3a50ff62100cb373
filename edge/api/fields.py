"""A request body's fields as data: one table per endpoint drives both the validator (each
problem a 400 naming the field) and the JSON Schema of the body in the API's OpenAPI document
(`edge/api/openapi.py`), so what is documented is what is checked.

A `Field` is a plain value (a string, an integer, a number, a boolean, an object) with its
bounds. A field whose rules don't fit the table (a list of messages, `stop`) brings its own
`parse` and the schema fragment that says the same; a rule across fields adds `body_schema`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from edge.api.json_body import ApiError, json_object

JsonSchema = dict[str, Any]
Parse = Callable[[Any, dict[str, Any]], Any]  # (value or None, the body) → the value or ApiError

# What Python's `str.strip()` removes, spelled out: JSON Schema's `\s` is not quite that set.
WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
NOT_BLANK = f"[^{WHITESPACE}]"  # searched for: some character that isn't whitespace

TYPE_MESSAGES = {
    "string": "'{name}' must be a string.",
    "integer": "'{name}' must be an integer.",
    "number": "'{name}' must be a number.",
    "boolean": "'{name}' must be true or false.",
    "object": "'{name}' must be an object.",
}


def invalid(field: str, message: str) -> ApiError:
    return ApiError(400, "invalid_field", message, field)


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _either(values: Sequence[Any]) -> str:
    shown = [f'"{v}"' if isinstance(v, str) else str(v) for v in values]
    return ", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]


# The largest integer a field takes, bounds or none: past it, a number is refused (2**63 - 1,
# what an upstream's 64-bit field, a seed say, can hold).
MAX_JSON_INTEGER = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a request body: how it is checked and how it is documented.

    A field not sent is its `default`, and so is a null unless the field is `required` or
    not `nullable`. A `pattern` must match the whole of a non-empty string. `message`, when set,
    is the one answer to every problem with the field.
    """

    name: str
    type: str  # the JSON type: string, integer, number, boolean, object; any with `parse`
    description: str
    required: bool = False
    nullable: bool = True
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int = 0
    max_length: int | None = None
    not_blank: bool = False
    pattern: re.Pattern[str] | None = None
    pattern_message: str = ""
    enum: tuple[Any, ...] = ()
    message: str = ""
    examples: tuple[Any, ...] = ()
    parse: Parse | None = None
    fragment: JsonSchema | None = None  # the schema of a field with its own `parse`
    body_schema: JsonSchema | None = None  # a rule across fields, added to the body's schema

    def _refused(self, message: str) -> ApiError:
        return invalid(self.name, self.message or message.format(name=self.name))

    def check(self, body: dict[str, Any]) -> Any:
        """The value to use, or the ApiError naming what is wrong with it."""
        if self.parse is not None:
            return self.parse(body.get(self.name), body)
        if self.name not in body and not self.required:
            return self.default
        value: Any = body.get(self.name)
        if value is None and self.required:
            return self._refused("'{name}' is required.")
        if value is None and self.nullable:
            return self.default
        if self.enum:
            if any(type(value) is type(option) and value == option for option in self.enum):
                return value
            return self._refused(f"'{{name}}' must be {_either(self.enum)}.")
        if not _is_type(value, self.type):
            return self._refused(TYPE_MESSAGES[self.type])
        if self.type in ("integer", "number"):
            return self._number(value)
        if self.type == "string":
            return self._string(value)
        return value

    def _number(self, value: float) -> Any:
        low, high = self.minimum, self.maximum
        bounded = low is not None or high is not None
        # An integer past a float's range (JSON has no limit) is out of every range here;
        # `math.isfinite` would raise on it.
        if isinstance(value, int) and abs(value) > MAX_JSON_INTEGER:
            return self._refused(self._range() if bounded else TYPE_MESSAGES[self.type])
        if not math.isfinite(value):
            return self._refused(self._range() if bounded else TYPE_MESSAGES["number"])
        if (low is not None and value < low) or (high is not None and value > high):
            return self._refused(self._range())
        return float(value) if self.type == "number" else int(value)

    def _range(self) -> str:
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f"'{{name}}' must be from {_shown(low)} to {_shown(high)}."
        if low is not None:
            return f"'{{name}}' must be at least {_shown(low)}."
        assert high is not None
        return f"'{{name}}' must be at most {_shown(high)}."

    def _string(self, value: str) -> Any:
        if (self.not_blank and not value.strip()) or len(value) < self.min_length:
            return self._refused("'{name}' cannot be blank.")
        if self.max_length is not None and len(value) > self.max_length:
            return self._refused(f"'{{name}}' may be at most {self.max_length} characters.")
        if value and self.pattern is not None and not self.pattern.fullmatch(value):
            return self._refused(self.pattern_message)
        return value

    def schema(self) -> JsonSchema:
        schema: JsonSchema = dict(self.fragment) if self.fragment is not None else self._schema()
        schema["description"] = self.description
        if self.default not in (None, ""):
            schema["default"] = self.default
        if self.examples:
            schema["examples"] = list(self.examples)
        return schema

    def _schema(self) -> JsonSchema:
        nullable = self.nullable and not self.required
        schema: JsonSchema = {"type": [self.type, "null"] if nullable else self.type}
        if self.enum:
            schema["enum"] = [*self.enum, None] if nullable else list(self.enum)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.min_length:
            schema["minLength"] = self.min_length
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        patterns = []
        if self.not_blank:
            patterns.append(NOT_BLANK)
        if self.pattern is not None:
            patterns.append(f"^(?:{self.pattern.pattern})?$")
        if len(patterns) == 1:
            schema["pattern"] = patterns[0]
        elif patterns:
            schema["allOf"] = [{"pattern": pattern} for pattern in patterns]
        return schema


def _is_type(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        # JSON has numbers, not integers: 5.0 is the integer 5, as JSON Schema says too.
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float)
    return isinstance(value, {"string": str, "boolean": bool, "object": dict}[kind])


def checked(body: dict[str, Any], fields: Iterable[Field]) -> dict[str, Any] | ApiError:
    """Each field's value by name, in the table's order, or the first problem found."""
    values: dict[str, Any] = {}
    for field in fields:
        if field.name not in body and field.parse is None and not field.required:
            values[field.name] = field.default  # most fields of most bodies: no call needed
            continue
        value = field.check(body)
        if isinstance(value, ApiError):
            return value
        values[field.name] = value
    return values


def names(fields: Iterable[Field]) -> frozenset[str]:
    return frozenset(field.name for field in fields)


def unknown_field(body: dict[str, Any], known: frozenset[str]) -> str | None:
    """The first field of the body (by name) that isn't `known`."""
    if known.issuperset(body):
        return None
    return min(set(body) - known)


def body_schema(fields: Sequence[Field], *, description: str) -> JsonSchema:
    """The JSON Schema of a body made of `fields` and nothing else."""
    schema: JsonSchema = {
        "type": "object",
        "description": description,
        "properties": {field.name: field.schema() for field in fields},
        "additionalProperties": False,
    }
    required = [field.name for field in fields if field.required]
    if required:
        schema["required"] = required
    rules = [field.body_schema for field in fields if field.body_schema is not None]
    if rules:
        schema["allOf"] = rules
    return schema


# OpenAI's words for a field it doesn't know (its own endpoints and ours that copy them).
OPENAI_UNKNOWN = "Unrecognized request argument supplied: {name}"


@dataclass(frozen=True)
class BodyTable:
    """One endpoint's body: the fields it reads, in order; the fields it refuses by name, each
    with its own message (`refused`, checked first); and what a field in neither is told. Its
    `read` is every endpoint's preamble: a JSON object, no refused field, no unknown field,
    then each field's value by name, or the first problem as a 400."""

    fields: tuple[Field, ...]
    refused: tuple[Field, ...] = ()
    unknown: str = OPENAI_UNKNOWN

    @property
    def all_fields(self) -> tuple[Field, ...]:
        return (*self.refused, *self.fields)

    @functools.cached_property
    def known(self) -> frozenset[str]:
        return names(self.all_fields)

    def read(self, raw: bytes) -> dict[str, Any] | ApiError:
        body = json_object(raw)
        if isinstance(body, ApiError):
            return body
        if self.refused:
            refusal = checked(body, [field for field in self.refused if field.name in body])
            if isinstance(refusal, ApiError):
                return refusal
        unknown = unknown_field(body, self.known)
        if unknown is not None:
            return invalid(unknown, self.unknown.format(name=unknown))
        return checked(body, self.fields)

    def schema(self, description: str) -> JsonSchema:
        return body_schema(self.all_fields, description=description)
