"""Drive an admin change form as a browser would: read its current values, change some, post."""

from __future__ import annotations

from typing import Any

from django import forms
from django.test import Client


def change_form_data(client: Client, url: str, **changes: Any) -> dict[str, Any]:
    """The form's current values as POST data, with `changes` applied (False unticks a box)."""
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    form = response.context["adminform"].form
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if isinstance(field, forms.BooleanField):
            if value:
                data[name] = "on"
            continue
        if callable(value):
            value = value()
        data[name] = "" if value is None else getattr(value, "pk", value)
    for name, value in changes.items():
        if value is False:
            data.pop(name, None)
        elif value is True:
            data[name] = "on"
        else:
            data[name] = value
    return data
