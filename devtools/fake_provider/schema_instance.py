"""A minimal instance of a JSON schema: what the fake provider answers for a tool's arguments
and for a structured-output request.

Deterministic and small: an object gets its required properties only, a string "example" (or
the first enum value, a const, a sample of its format), an integer 1, a number 1.5, a boolean
true, an array one item (more when minItems asks). anyOf/oneOf take their first branch, allOf
merges its branches, and `$ref` is followed within the schema itself (`#/$defs/...`,
`#/definitions/...`, `#`).
"""

from __future__ import annotations

from typing import Any

# Past this depth (a schema referring to itself) the generator answers null.
_MAX_DEPTH = 24
_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com",
    "url": "https://example.com",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def instance(schema: Any) -> Any:
    """A minimal value valid against `schema` (a schema that is not an object gives {})."""
    if not isinstance(schema, dict):
        return {}
    return _instance(schema, schema, 0)


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    if not ref.startswith("#"):
        return {}
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return {}
    return node


def _instance(schema: Any, root: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return None
    if schema is True or not isinstance(schema, dict):
        return "example"
    if isinstance(schema.get("$ref"), str):
        return _instance(_resolve(schema["$ref"], root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema and "type" not in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return _instance(branches[0], root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        return _all_of(schema, root, depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = _inferred_type(schema)
    return _of_type(kind, schema, root, depth)


def _all_of(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Any:
    values = [_instance(branch, root, depth + 1) for branch in schema["allOf"]]
    rest = {key: value for key, value in schema.items() if key != "allOf"}
    if rest:
        values.append(_instance(rest, root, depth + 1))
    if all(isinstance(value, dict) for value in values):
        merged: dict[str, Any] = {}
        for value in values:
            merged.update(value)
        return merged
    return values[0]


def _inferred_type(schema: dict[str, Any]) -> str:
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _of_type(kind: Any, schema: dict[str, Any], root: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = (
            [name for name in required if isinstance(name, str)]
            if isinstance(required, list)
            else []
        )
        return {name: _instance(properties.get(name, {}), root, depth + 1) for name in names}
    if kind == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            return [_instance(item, root, depth + 1) for item in prefix]
        minimum = schema.get("minItems")
        count = max(1, minimum) if isinstance(minimum, int) else 1
        return [_instance(schema.get("items", {}), root, depth + 1)] * count
    if kind == "integer":
        return _bounded(schema, 1)
    if kind == "number":
        return _bounded(schema, 1.5)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _bounded(schema: dict[str, Any], value: float) -> Any:
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(high, int | float) and value > high:
        value = high
    return value


def _string(schema: dict[str, Any]) -> str:
    text = _FORMATS.get(str(schema.get("format")), "example")
    minimum = schema.get("minLength")
    if isinstance(minimum, int) and len(text) < minimum:
        text = text + "x" * (minimum - len(text))
    maximum = schema.get("maxLength")
    if isinstance(maximum, int) and len(text) > maximum:
        text = text[:maximum]
    return text
