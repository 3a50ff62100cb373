"""Admin base classes: every operator change through the admin lands in `ConfigChange`, and the
audit tables are read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from providers.models import ChangeAction
from providers.services.audit import config_change_record, instance_snapshot


class AuditedModelAdmin(admin.ModelAdmin):
    """Records who created, changed or deleted a row, with the values before and after.

    The admin wraps each of these in one transaction, so a save and its record stand or fall
    together: a change never lands without its audit row.
    """

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        before = instance_snapshot(self.model._default_manager.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        self.record_change(request, obj, before=before, after=instance_snapshot(obj))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        before = instance_snapshot(obj)
        config_change_record(
            target=obj, action=ChangeAction.DELETE, before=before, after=None, actor=request.user
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            config_change_record(
                target=obj,
                action=ChangeAction.DELETE,
                before=instance_snapshot(obj),
                after=None,
                actor=request.user,
            )
        super().delete_queryset(request, queryset)

    def record_change(
        self,
        request: HttpRequest,
        obj: models.Model,
        *,
        before: dict[str, Any] | None,
        after: dict[str, Any],
    ) -> None:
        config_change_record(
            target=obj,
            action=ChangeAction.CREATE if before is None else ChangeAction.UPDATE,
            before=before,
            after=after,
            actor=request.user,
        )


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """For records nobody edits: staff with the view permission read them, nobody writes."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
