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
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import models, transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from ..admin import KILL_SWITCH_FIELDS, FailoverPolicyAdmin
from ..models import ChangeAction, ConfigChange, FailoverPolicy
from ..selectors import policy_get
from ..services import Actor, config_change_record, instance_snapshot

VIEW_PERMISSION = "providers.view_failoverpolicy"
CHANGE_PERMISSION = "providers.change_failoverpolicy"
TEMPLATE = "control/thresholds.html"
# The kill switch has its own control (and permission) on the status page.
NOT_THRESHOLDS = (*KILL_SWITCH_FIELDS, "updated_at")
INITIAL_PREFIX = "initial-"


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


class ThresholdsForm(forms.ModelForm):
    class Meta:
        model = FailoverPolicy
        exclude = NOT_THRESHOLDS

    def clean_degradation_message(self) -> str:
        # A browser sends a textarea's lines with CRLF; keep the stored text as it was typed.
        return str(self.cleaned_data["degradation_message"]).replace("\r\n", "\n")

    def add_error(self, field: str | None, error: Any) -> None:
        # The model's clean() also checks the kill switch, which this form doesn't hold:
        # Django would raise ValueError for an error on a field the form lacks.
        if field is None and isinstance(error, ValidationError) and hasattr(error, "error_dict"):
            mapped: dict[str, list[ValidationError]] = {}
            for name, messages in error.error_dict.items():
                mapped.setdefault(name if name in self.fields else NON_FIELD_ERRORS, []).extend(
                    messages
                )
            error = ValidationError(mapped)
        super().add_error(field, error)


def threshold_names() -> list[str]:
    return list(ThresholdsForm.base_fields)


def threshold_groups() -> list[tuple[str, list[str]]]:
    """The admin's fieldsets without the kill switch; a field they miss goes under "Other"."""
    names = threshold_names()
    groups: list[tuple[str, list[str]]] = []
    placed: set[str] = set()
    fieldsets: Any = FailoverPolicyAdmin.fieldsets
    for title, options in fieldsets:
        group = []
        for line in options["fields"]:
            for name in line if isinstance(line, tuple | list) else (line,):
                if name in names and name not in placed:
                    group.append(name)
                    placed.add(name)
        if group:
            groups.append((str(title), group))
    rest = [name for name in names if name not in placed]
    if rest:
        groups.append(("Other", rest))
    return groups


def _model_field(name: str) -> models.Field:
    model_field = FailoverPolicy._meta.get_field(name)
    assert isinstance(model_field, models.Field)
    return model_field


def _loaded(form_field: forms.Field, value: Any) -> str:
    """A value as the form's hidden `initial-*` input carries it."""
    return str(forms.HiddenInput().format_value(form_field.prepare_value(value)) or "")


def _edited(form_field: forms.Field, submitted: Any, before: Any) -> bool:
    try:
        return bool(form_field.has_changed(before, submitted))
    except ValidationError:
        return True


@dataclass(frozen=True)
class Edit:
    name: str
    value: Any  # as the widget read it from the request
    conflict: Any = None  # the row's value, when someone else changed it since it was loaded
    conflicted: bool = False


def _edits(data: Mapping[str, Any], row: FailoverPolicy) -> dict[str, Edit]:
    """The fields this request changes. With the form's `initial-*` values, a field counts as
    edited when it moved from what was loaded (a conflict when the row moved too); without
    them, when the request names it with a value other than the row's."""
    form = ThresholdsForm(instance=row)
    edits: dict[str, Edit] = {}
    for name, form_field in form.fields.items():
        current = form[name].value()
        loaded_raw = data.get(INITIAL_PREFIX + name)
        if loaded_raw is None and name not in data:
            continue
        submitted = form_field.widget.value_from_datadict(data, {}, name)
        if loaded_raw is None:
            if _edited(form_field, submitted, current):
                edits[name] = Edit(name, submitted)
            continue
        try:
            loaded = form_field.to_python(loaded_raw)
        except ValidationError:
            edits[name] = Edit(name, submitted)
            continue
        if not _edited(form_field, submitted, loaded):
            continue
        # Someone else moved it since it was loaded, and not to the value typed here.
        moved = _edited(form_field, loaded_raw, current) and _edited(form_field, submitted, current)
        now = _model_field(name).value_from_object(row) if moved else None
        edits[name] = Edit(name, submitted, conflict=now, conflicted=moved)
    return edits


def _row_data(row: FailoverPolicy) -> dict[str, Any]:
    form = ThresholdsForm(instance=row)
    return {name: form[name].value() for name in form.fields}


def _locked_policy() -> FailoverPolicy:
    return FailoverPolicy.objects.select_for_update().get(pk=policy_get().pk)


@dataclass
class Saved:
    form: ThresholdsForm
    change: ConfigChange | None = None


def thresholds_update(*, data: Mapping[str, Any], actor: Actor) -> Saved:
    """Apply the fields the request edited to the policy as it is now, validated by the model's
    validators and clean(); saved with one UPDATE change record, or nothing saved at all."""
    with transaction.atomic():
        row = _locked_policy()
        before = instance_snapshot(row)
        edits = _edits(data, row)
        merged = _row_data(row) | {name: edit.value for name, edit in edits.items()}
        form = ThresholdsForm(merged, instance=row)
        valid = form.is_valid()  # fills `row` with the form's values, saved or not
        for edit in edits.values():
            if edit.conflicted:
                value = display_value(edit.name, edit.conflict)
                form.add_error(
                    edit.name,
                    f"Someone else changed this to {value} while you were editing. "
                    "Save again to replace it with your value.",
                )
                valid = False
        if not valid or not edits:
            return Saved(form)
        form.save()
        change = config_change_record(
            target=row,
            action=ChangeAction.UPDATE,
            before=before,
            after=instance_snapshot(row),
            actor=actor,
        )
    return Saved(form, change)


def threshold_reset_default(*, name: str, actor: Actor) -> ConfigChange | None:
    """Set one threshold back to its model default, validated with the whole row (full_clean):
    raises ValidationError and saves nothing when the default doesn't fit the other values.
    None when it already holds the default."""
    if name not in threshold_names():
        raise KeyError(name)
    model_field = _model_field(name)
    with transaction.atomic():
        row = _locked_policy()
        before = instance_snapshot(row)
        default = model_field.get_default()
        if model_field.value_from_object(row) == default:
            return None
        setattr(row, model_field.attname, default)
        row.full_clean()
        row.save(update_fields=[model_field.attname, "updated_at"])
        return config_change_record(
            target=row,
            action=ChangeAction.RESET_DEFAULT,
            before={model_field.attname: before[model_field.attname]},
            after={model_field.attname: instance_snapshot(row)[model_field.attname]},
            actor=actor,
        )


def display_value(name: str, value: Any) -> str:
    """A threshold's value as an operator reads it: choices by label, yes/no, "(empty)"."""
    model_field = _model_field(name)
    if model_field.choices:
        return str(dict(model_field.flatchoices).get(value, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == "":
        return "(empty)"
    return str(value)


@dataclass(frozen=True)
class Moved:
    label: str
    before: str
    after: str


def moved_fields(change: ConfigChange | None) -> list[Moved]:
    if change is None or not change.after:
        return []
    names = {_model_field(name).attname: name for name in threshold_names()}
    before = change.before or {}
    return [
        Moved(
            label=str(_model_field(names[key]).verbose_name),
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
            model_field = _model_field(name)
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
                row.loaded = (loaded or {}).get(name, _loaded(form.fields[name], value))
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


@require_POST
def thresholds_save(request: HttpRequest, site: AdminSite) -> HttpResponse:
    _require_change(request)
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
    status = 200
    errors: dict[str, list[str]] = {}
    notices: dict[str, str] = {}
    try:
        change = threshold_reset_default(name=name, actor=request.user)
    except ValidationError as exc:
        status = 422
        default = display_value(name, _model_field(name).get_default())
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
        for edit in _edits(request.POST, policy).values()
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
