"""Strict reading of what a form or a query string sends, for the control room and the admin.

A field holds one value, never a NUL character (PostgreSQL refuses it in text, so a query or a
save with one fails), and at most its length. A whole number is ASCII digits only: `isdigit()`
takes '²', which `int()` refuses, and `int()` itself reads '٣' and '１' as digits. A choice is
one of its values. Each refusal is kept by field, so a form shows every mistake at once, and a
view without a form answers them with a 400 (`bad_request`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import HttpResponse, QueryDict

NUL = "\x00"
NUL_REFUSED = "A NUL character is not allowed here."
# Below 2**63 - 1: an id a bigint column holds on every database (SQLite raises past it).
MAX_ID = 10**18
DIGITS = re.compile(r"[0-9]{1,18}")
DEFAULT_MAX_LENGTH = 10_000


def nul_free(value: Any) -> bool:
    """No NUL character in `value`, nor in any string inside it (a JSON field's keys and values)."""
    if isinstance(value, str):
        return NUL not in value
    if isinstance(value, Mapping):
        return all(nul_free(key) and nul_free(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(nul_free(item) for item in value)
    return True


def object_ids(values: Iterable[str]) -> list[int] | None:
    """Row ids as a list of checkboxes sends them; None when any is not one."""
    found = []
    for value in values:
        if not DIGITS.fullmatch(value) or not 1 <= int(value) < MAX_ID:
            return None
        found.append(int(value))
    return found


class FormInput:
    """Reads the fields of one request's data strictly, keeping what it refuses by field.

    Each reader answers the field's value, or its default when the field is missing or
    refused; `errors` then says what was refused, field by field."""

    def __init__(self, data: QueryDict) -> None:
        self.data = data
        self.errors: dict[str, list[str]] = {}

    def refuse(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def text(self, name: str, *, default: str = "", max_length: int = DEFAULT_MAX_LENGTH) -> str:
        """One value, without NUL, of at most `max_length` characters."""
        values = self.data.getlist(name)
        if not values:
            return default
        if len(values) > 1:
            self.refuse(name, "Send one value, not several.")
            return default
        value = str(values[0])
        if NUL in value:
            self.refuse(name, NUL_REFUSED)
            return default
        if len(value) > max_length:
            self.refuse(name, f"Keep it to {max_length} characters at most.")
            return default
        return value

    def whole_number(
        self,
        name: str,
        *,
        low: int,
        high: int,
        default: int | None = None,
        message: str = "",
    ) -> int | None:
        """A whole number from `low` to `high`, typed in ASCII digits; blank is the default."""
        value = self.text(name, max_length=len(str(high)) + 40).strip()
        if not value or name in self.errors:
            return default
        if not DIGITS.fullmatch(value) or not low <= int(value) <= high:
            self.refuse(name, message or f"Enter a whole number from {low} to {high}.")
            return default
        return int(value)

    def object_id(self, name: str) -> int | None:
        """A row's id (a positive whole number), or None when the field is blank."""
        return self.whole_number(
            name, low=1, high=MAX_ID - 1, message="That is not an id: choose from the list."
        )

    def choice(self, name: str, choices: Collection[str], *, default: str) -> str:
        """One of `choices`; the default when the field is missing."""
        value = self.text(name, default=default, max_length=200)
        if value not in choices and name not in self.errors:
            self.refuse(name, f"Choose one of: {', '.join(sorted(choices))}.")
            return default
        return value

    def single(self, names: Iterable[str]) -> None:
        """Refuse any of these fields sent with more than one value."""
        for name in names:
            if len(self.data.getlist(name)) > 1:
                self.refuse(name, "Send one value, not several.")


def bad_request(errors: Mapping[str, list[str]]) -> HttpResponse:
    """A 400 naming each refused field, for a view with no form to show them on."""
    lines = [f"{name}: {message}" for name, messages in errors.items() for message in messages]
    return HttpResponse("\n".join(lines) + "\n", status=400, content_type="text/plain")


def errors_on_fields(error: Any, fields: Collection[str]) -> Any:
    """A model's errors as a form can show them: each one on a column the form doesn't hold
    moved to the form's own errors (Django raises ValueError for an error on a field the form
    lacks). Anything but a `ValidationError` by field is returned as it is."""
    if not isinstance(error, ValidationError) or not hasattr(error, "error_dict"):
        return error
    mapped: dict[str, list[ValidationError]] = {}
    for name, messages in error.error_dict.items():
        mapped.setdefault(name if name in fields else NON_FIELD_ERRORS, []).extend(messages)
    return ValidationError(mapped)
