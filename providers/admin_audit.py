"""Admin base classes: every operator change through the admin lands in `ConfigChange`, the
audit tables are read-only, and no input, however made up, answers a server error."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import IntegerField, Model, QuerySet
from django.forms import BaseModelFormSet, ModelForm
from django.http import HttpRequest, HttpResponse

from providers.form_input import (
    NUL,
    NUL_REFUSED,
    bad_request,
    errors_on_fields,
    nul_free,
    object_ids,
)
from providers.services.audit import RecordChange, row_save, rows_delete


class StrictModelForm(ModelForm):
    """The admin's forms: a NUL character is refused in any value, a JSON field's strings
    included (PostgreSQL stores none: the save would fail), and an error the model's clean()
    files on a field the form doesn't show (a list's editable columns) is the form's own."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        for name, value in list(cleaned.items()):
            if not nul_free(value):
                self.add_error(name, NUL_REFUSED)
        return cleaned

    def add_error(self, field: str | None, error: Any) -> None:
        # Django raises ValueError for an error on a field the form lacks.
        super().add_error(field, error if field else errors_on_fields(error, self.fields))


class StrictModelAdmin(admin.ModelAdmin):
    """A model admin that reads what it is sent strictly: made-up input is a 400 or the form's
    own error, never a server error."""

    form = StrictModelForm

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Model | None:
        # A blank `?_to_field=` names no field: Django would look up a field named "".
        return super().get_object(request, object_id, from_field or None)

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[ModelForm]:
        return super().get_changelist_form(request, **{"form": StrictModelForm, **kwargs})

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The list's filters and search go into the query as they are: a NUL fails it on
        # PostgreSQL. The rows an action or the list's editable columns are for go into it as
        # ids: past a bigint, SQLite fails it.
        errors: dict[str, list[str]] = {}
        for name, values in request.GET.lists():
            if NUL in name or any(NUL in value for value in values):
                errors[name.replace(NUL, "\\x00")] = [NUL_REFUSED]
        if isinstance(self.opts.pk, IntegerField):
            row = re.compile(rf"form-[0-9]+-{re.escape(self.opts.pk.name)}")
            for name, values in request.POST.lists():
                if name == ACTION_CHECKBOX_NAME:
                    given = values
                elif row.fullmatch(name):
                    given = [value for value in values if value]  # blank: a row not yet saved
                else:
                    continue
                if object_ids(given) is None:
                    errors[name] = ["The rows are given by their ids."]
        if errors:
            return bad_request(errors)
        return super().changelist_view(request, extra_context)


class AuditedModelAdmin(StrictModelAdmin):
    """Records who created, changed or deleted a row, with the values before and after.

    Every save and delete goes through the audit services (`providers.services.audit`): the
    row and its record in one transaction, the config version moved once it commits.
    `record_change` names a model's own way of recording a change (the policy's kill switch).
    """

    record_change: RecordChange | None = None

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        row_save(row=obj, actor=request.user, record=self.record_change)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        rows_delete(rows=[obj], actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        rows_delete(rows=list(queryset), actor=request.user)

    def save_formset(
        self, request: HttpRequest, form: ModelForm, formset: BaseModelFormSet, change: bool
    ) -> None:
        """An inline's rows through the same services: each added, changed or deleted row is
        recorded (and so moves the config version) even when the parent row itself is
        unchanged."""
        rows = formset.save(commit=False)
        if formset.deleted_objects:
            rows_delete(rows=formset.deleted_objects, actor=request.user)
        for row in rows:
            row_save(row=row, actor=request.user)
        formset.save_m2m()


class ReadOnlyModelAdmin(StrictModelAdmin):
    """For records nobody edits: staff with the view permission read them, nobody writes."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
