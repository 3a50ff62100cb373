"""A request body as JSON the endpoints can trust: an object, not nested past a sane depth, and
holding only text that is text. Everything else is a 400 naming the problem, never a 500: a
body of 40 KB of brackets would otherwise reach the parser's recursion limit, and a lone
surrogate (`"\\ud800"`) passes the parser only to break the first encode on the way to a
provider, the cache or the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Deeper than any request the endpoints take (a chat message's content parts are four levels
# down): a body nested past this is refused before anything walks it.
MAX_DEPTH = 16


@dataclass(frozen=True, slots=True)
class ApiError:
    status: int
    code: str
    message: str
    field: str | None = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


# The gateway's own error shape, `{"error": ApiError.as_dict()}` (OpenAI's is on /v1/).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The gateway's error shape.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "examples": ["invalid_field", "invalid_api_key"]},
                "message": {"type": "string"},
                "field": {"type": "string", "description": "The field at fault, if one is."},
                "request_id": {"type": "string", "description": "On an error after routing."},
                "provider": {"type": "string", "description": "The provider that refused it."},
            },
        }
    },
}


def _invalid_json(message: str) -> ApiError:
    return ApiError(400, "invalid_json", message)


def json_object(raw: bytes) -> dict[str, Any] | ApiError:
    try:
        # Decoded here, strictly: `json.loads` given bytes would guess UTF-16 and let an encoded
        # lone surrogate through (it decodes UTF-8 with "surrogatepass").
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _invalid_json("The body is not UTF-8 text.")
    try:
        body = json.loads(text)
    except RecursionError:
        return _invalid_json(f"The body is nested more than {MAX_DEPTH} levels deep.")
    except ValueError as exc:
        return _invalid_json(f"The body is not valid JSON: {exc}.")
    if not isinstance(body, dict):
        return _invalid_json("The body must be a JSON object.")
    # Only an escape can carry a lone surrogate into a parsed string: most bodies have none.
    check_text = "\\u" in text
    # Nor can a value sit deeper than the body's opening brackets, plus one: most bodies hold
    # a handful, and then there is nothing to walk.
    if not check_text and text.count("{") + text.count("[") < MAX_DEPTH:
        return body
    problem = _checked(body, 1, check_text=check_text)
    return body if problem is None else problem


def _checked(value: Any, depth: int, *, check_text: bool, where: str = "") -> ApiError | None:
    """What is wrong with a parsed value (None when nothing), found without recursing past
    MAX_DEPTH."""
    if depth > MAX_DEPTH:
        return _invalid_json(f"The body is nested more than {MAX_DEPTH} levels deep.")
    if isinstance(value, str):
        return _text_problem(value, where) if check_text else None
    if isinstance(value, dict):
        items: Any = (
            (key, f"{where}.{key}" if where else str(key), item) for key, item in value.items()
        )
    elif isinstance(value, list):
        items = ((None, f"{where}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for key, path, item in items:
        if check_text and isinstance(key, str):
            problem = _text_problem(key, path)
            if problem:
                return problem
        problem = _checked(item, depth + 1, check_text=check_text, where=path)
        if problem:
            return problem
    return None


def _text_problem(text: str, where: str) -> ApiError | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        message = (
            f"{where or 'A name'} holds a lone surrogate (an unpaired \\ud800–\\udfff "
            "escape): it is not text."
        )
        return ApiError(400, "invalid_field", message, where or None)
    return None
