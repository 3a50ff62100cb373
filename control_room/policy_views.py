"""The thresholds editor: every threshold of the failover policy, edited in place.

One form holds the policy's fields except the kill switch (it has its own control on the status
page), grouped like the admin's fieldsets, each with its current value, its help and its
default. A save and a "back to default" are each one recorded change in the transaction that
makes them, so every serving process picks them up within a second.

Two operators may edit at once. The form carries the values it was loaded with (`initial-*`),
so a save writes only the fields this operator edited, onto the row as it is now; a field that
someone else changed meanwhile is refused with the new value shown, never silently overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from providers.form_input import FormInput
from providers.models import ConfigChange
from providers.selectors import policy_get
from providers.services.policy import (
    INITIAL_PREFIX,
    ThresholdsForm,
    display_value,
    loaded_value,
    policy_field,
    threshold_edits,
    threshold_groups,
    threshold_names,
    threshold_reset_default,
    thresholds_update,
)

VIEW_PERMISSION = "providers.view_failoverpolicy"
CHANGE_PERMISSION = "providers.change_failoverpolicy"
TEMPLATE = "control/thresholds.html"


def urls(site: AdminSite) -> list[URLPattern]:
    extra = {"site": site}
    return [
        path(
            "control/thresholds/",
            site.admin_view(thresholds_page),
            extra,
            name="control-thresholds",
        ),
        path(
            "control/thresholds/save/",
            site.admin_view(thresholds_save),
            extra,
            name="control-thresholds-save",
        ),
        path(
            "control/thresholds/reset/<str:name>/",
            site.admin_view(threshold_reset),
            extra,
            name="control-thresholds-reset",
        ),
    ]


@dataclass(frozen=True)
class Moved:
    label: str
    before: str
    after: str


def moved_fields(change: ConfigChange | None) -> list[Moved]:
    if change is None or not change.after:
        return []
    names = {policy_field(name).attname: name for name in threshold_names()}
    before = change.before or {}
    return [
        Moved(
            label=str(policy_field(names[key]).verbose_name),
            before=display_value(names[key], before.get(key)),
            after=display_value(names[key], value),
        )
        for key, value in change.after.items()
        if key in names
    ]


@dataclass
class Row:
    name: str
    label: str
    help_text: str
    current: str
    default: str
    at_default: bool
    is_checkbox: bool = False
    loaded: str = ""
    bound: forms.BoundField | None = None
    errors: list[str] = field(default_factory=list)
    notice: str = ""


def _context(
    request: HttpRequest,
    site: AdminSite,
    *,
    form: ThresholdsForm | None = None,
    row_errors: Mapping[str, list[str]] | None = None,
    row_notices: Mapping[str, str] | None = None,
    loaded: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    policy = policy_get()
    can_change = request.user.has_perm(CHANGE_PERMISSION)
    if can_change and form is None:
        form = ThresholdsForm(instance=policy)
    groups = []
    for title, names in threshold_groups():
        rows = []
        for name in names:
            model_field = policy_field(name)
            value = model_field.value_from_object(policy)
            default = model_field.get_default()
            row = Row(
                name=name,
                label=str(model_field.verbose_name),
                help_text=str(model_field.help_text),
                current=display_value(name, value),
                default=display_value(name, default),
                at_default=value == default,
                errors=list((row_errors or {}).get(name, [])),
                notice=(row_notices or {}).get(name, ""),
            )
            if form is not None:
                row.bound = form[name]
                row.is_checkbox = isinstance(form.fields[name].widget, forms.CheckboxInput)
                row.loaded = (loaded or {}).get(name, loaded_value(form.fields[name], value))
            rows.append(row)
        groups.append({"title": title, "rows": rows})
    return {
        **site.each_context(request),
        "title": "Thresholds",
        "policy": policy,
        "form": form,
        "groups": groups,
        "can_change": can_change,
        **extra,
    }


def _render(
    request: HttpRequest, site: AdminSite, status: int = 200, **context: Any
) -> TemplateResponse:
    template = f"{TEMPLATE}#thresholds" if getattr(request, "htmx", False) else TEMPLATE
    return TemplateResponse(request, template, _context(request, site, **context), status=status)


def _require_change(request: HttpRequest) -> None:
    if not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied("Changing thresholds takes the failover policy change permission.")


@require_GET
def thresholds_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    user = request.user
    if not (user.has_perm(VIEW_PERMISSION) or user.has_perm(CHANGE_PERMISSION)):
        raise PermissionDenied("Seeing thresholds takes the failover policy view permission.")
    return _render(request, site)


def _several_values(request: HttpRequest) -> dict[str, list[str]]:
    """Thresholds sent with more than one value, by threshold: the form never sends them, and
    which one was meant can't be told. (Their loaded values may come twice: a field with a
    callable default renders its own hidden `initial-*` input beside the row's.)"""
    given = FormInput(request.POST)
    given.single(threshold_names())
    return {
        name: [f"{message} Nothing was saved." for message in messages]
        for name, messages in given.errors.items()
    }


@require_POST
def thresholds_save(request: HttpRequest, site: AdminSite) -> HttpResponse:
    _require_change(request)
    if several := _several_values(request):
        return _render(request, site, status=422, row_errors=several)
    saved = thresholds_update(data=request.POST, actor=request.user)
    if saved.form.errors:
        return _render(request, site, status=422, form=saved.form)
    moved = moved_fields(saved.change)
    notice = "Saved. Serving processes use it within a second." if moved else "Nothing changed."
    return _render(request, site, notice=notice, moved=moved)


@require_POST
def threshold_reset(request: HttpRequest, site: AdminSite, name: str) -> HttpResponse:
    _require_change(request)
    if name not in threshold_names():
        raise Http404(f"No threshold named {name!r}.")
    if several := _several_values(request):
        return _render(request, site, status=422, row_errors=several)
    status = 200
    errors: dict[str, list[str]] = {}
    notices: dict[str, str] = {}
    try:
        change = threshold_reset_default(name=name, actor=request.user)
    except ValidationError as exc:
        status = 422
        default = display_value(name, policy_field(name).get_default())
        errors[name] = [f"Not reset to the default ({default}): nothing was saved."]
        errors[name] += [message for messages in exc.message_dict.values() for message in messages]
    else:
        moved = moved_fields(change)
        notices[name] = (
            f"Back to default: {moved[0].before} → {moved[0].after}."
            if moved
            else "Already at its default."
        )
    # Keep what the operator typed elsewhere in the form and hasn't saved yet, with the values
    # it was loaded with, so that saving it later still notices someone else's change.
    policy = policy_get()
    pending = [
        edit
        for edit in threshold_edits(request.POST, policy).values()
        if edit.name != name and INITIAL_PREFIX + edit.name in request.POST
    ]
    form = ThresholdsForm(instance=policy, initial={edit.name: edit.value for edit in pending})
    loaded = {edit.name: str(request.POST[INITIAL_PREFIX + edit.name]) for edit in pending}
    return _render(
        request,
        site,
        status,
        form=form,
        row_errors=errors,
        row_notices=notices,
        loaded=loaded,
    )
