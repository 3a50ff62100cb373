"""Admin base classes: every operator change through the admin lands in `ConfigChange`, and the
audit tables are read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.forms import BaseModelFormSet, ModelForm
from django.http import HttpRequest

from providers.services.audit import RecordChange, row_save, rows_delete


class AuditedModelAdmin(admin.ModelAdmin):
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


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """For records nobody edits: staff with the view permission read them, nobody writes."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
