"""Writes to the failover policy: the kill switch, and the thresholds edited in place.

Two operators may edit the thresholds at once. The editor's form carries the values it was
loaded with (`initial-*`), so a save writes only the fields this operator edited, onto the row
as it is now; a field that someone else changed meanwhile is refused with the new value shown,
never silently overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models, transaction

from providers.form_input import errors_on_fields
from providers.models import ChangeAction, ConfigChange, FailoverPolicy, KillSwitch, Provider
from providers.selectors import policy_get
from providers.services.audit import Actor, config_change_record, instance_snapshot

MAX_REASON_CHARS = 2000
# The kill switch has its own control (and permission) on the status page.
NOT_THRESHOLDS = (*FailoverPolicy.KILL_SWITCH_FIELDS, "updated_at")
INITIAL_PREFIX = "initial-"


def kill_switch_set(
    *, mode: str, provider: Provider | None, reason: str, actor: Actor
) -> FailoverPolicy:
    """Flip the kill switch. Raises ValidationError (by field) when the request doesn't hold."""
    reason = reason.strip()
    errors: dict[str, str] = {}
    if mode not in KillSwitch.values:
        errors["mode"] = "Choose normal routing, static answers only, or one provider."
    if not reason:
        errors["reason"] = "Say why: the reason goes on the record with the change."
    elif len(reason) > MAX_REASON_CHARS:
        errors["reason"] = f"Keep the reason under {MAX_REASON_CHARS} characters."
    if mode == KillSwitch.FORCE_PROVIDER and provider is None:
        errors["provider"] = "Choose the provider that should take all traffic."
    elif mode == KillSwitch.FORCE_PROVIDER and provider is not None and not provider.enabled:
        errors["provider"] = (
            f"{provider.name} is disabled: forcing traffic to it would send every request to "
            "the static answers. Enable it first, or choose static answers only."
        )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        policy = FailoverPolicy.objects.select_for_update().get(pk=policy_get().pk)
        before = {
            "kill_switch": policy.kill_switch,
            "kill_switch_provider_id": policy.kill_switch_provider_id,
        }
        policy.kill_switch = mode
        policy.kill_switch_provider = provider if mode == KillSwitch.FORCE_PROVIDER else None
        policy.kill_switch_reason = reason
        policy.full_clean()
        policy.save()
        config_change_record(
            target=policy,
            action=ChangeAction.KILL_SWITCH,
            before=before,
            after={
                "kill_switch": policy.kill_switch,
                "kill_switch_provider_id": policy.kill_switch_provider_id,
            },
            actor=actor,
            reason=reason,
        )
    return policy


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
        super().add_error(field, error if field else errors_on_fields(error, self.fields))


def threshold_names() -> list[str]:
    return list(ThresholdsForm.base_fields)


def threshold_groups() -> list[tuple[str, list[str]]]:
    """The policy's field groups without the kill switch; a field they miss goes under "Other"."""
    names = threshold_names()
    groups: list[tuple[str, list[str]]] = []
    placed: set[str] = set()
    for title, lines in FailoverPolicy.FIELD_GROUPS:
        group = []
        for line in lines:
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


def policy_field(name: str) -> models.Field:
    model_field = FailoverPolicy._meta.get_field(name)
    assert isinstance(model_field, models.Field)
    return model_field


def loaded_value(form_field: forms.Field, value: Any) -> str:
    """A value as the form's hidden `initial-*` input carries it."""
    return str(forms.HiddenInput().format_value(form_field.prepare_value(value)) or "")


def field_edited(form_field: forms.Field, submitted: Any, before: Any) -> bool:
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


def threshold_edits(data: Mapping[str, Any], row: FailoverPolicy) -> dict[str, Edit]:
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
            if field_edited(form_field, submitted, current):
                edits[name] = Edit(name, submitted)
            continue
        try:
            loaded = form_field.to_python(loaded_raw)
        except ValidationError:
            edits[name] = Edit(name, submitted)
            continue
        if not field_edited(form_field, submitted, loaded):
            continue
        # Someone else moved it since it was loaded, and not to the value typed here.
        moved = field_edited(form_field, loaded_raw, current) and field_edited(
            form_field, submitted, current
        )
        now = policy_field(name).value_from_object(row) if moved else None
        edits[name] = Edit(name, submitted, conflict=now, conflicted=moved)
    return edits


def row_data(row: FailoverPolicy) -> dict[str, Any]:
    form = ThresholdsForm(instance=row)
    return {name: form[name].value() for name in form.fields}


def locked_policy() -> FailoverPolicy:
    return FailoverPolicy.objects.select_for_update().get(pk=policy_get().pk)


@dataclass
class Saved:
    form: ThresholdsForm
    change: ConfigChange | None = None


def thresholds_update(*, data: Mapping[str, Any], actor: Actor) -> Saved:
    """Apply the fields the request edited to the policy as it is now, validated by the model's
    validators and clean(); saved with one UPDATE change record, or nothing saved at all."""
    with transaction.atomic():
        row = locked_policy()
        before = instance_snapshot(row)
        edits = threshold_edits(data, row)
        merged = row_data(row) | {name: edit.value for name, edit in edits.items()}
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
    model_field = policy_field(name)
    with transaction.atomic():
        row = locked_policy()
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
    model_field = policy_field(name)
    if model_field.choices:
        return str(dict(model_field.flatchoices).get(value, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == "":
        return "(empty)"
    return str(value)


def policy_change_record(
    *,
    row: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    actor: Actor,
) -> None:
    """The policy row saved whole (the admin's page): a kill-switch change is its own record,
    with its reason; the thresholds are another."""
    switch_keys = {"kill_switch", "kill_switch_provider_id"}
    switch_after = {key: value for key, value in after.items() if key in switch_keys}
    rest_after = {
        key: value
        for key, value in after.items()
        if key not in switch_keys and key != "kill_switch_reason"
    }
    before = before or {}
    if any(before.get(key) != value for key, value in switch_after.items()):
        config_change_record(
            target=row,
            action=ChangeAction.KILL_SWITCH,
            before={key: before.get(key) for key in switch_after},
            after=switch_after,
            actor=actor,
            reason=after.get("kill_switch_reason", ""),
        )
    config_change_record(
        target=row, action=ChangeAction.UPDATE, before=before, after=rest_after, actor=actor
    )
