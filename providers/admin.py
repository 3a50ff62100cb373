from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from providers.admin_audit import AuditedModelAdmin, ReadOnlyModelAdmin, StrictModelForm
from providers.models import (
    AliasEntry,
    ClientApp,
    ConfigChange,
    FailoverPolicy,
    ModelAlias,
    Provider,
    StaticAnswer,
)
from providers.selectors import policy_get
from providers.services.client_apps import client_app_create, client_app_revoke
from providers.services.policy import policy_change_record

KILL_SWITCH_FIELDS = FailoverPolicy.KILL_SWITCH_FIELDS


@admin.register(Provider)
class ProviderAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "kind",
        "model",
        "priority",
        "enabled",
        "is_local",
        "timeout_s",
        "api_key_status",
    )
    list_display_links = ("name",)
    # A URL typed without a scheme becomes https://; Ollama's local http:// is typed in full.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_editable = ("priority", "enabled")
    list_filter = ("kind", "enabled", "is_local")
    search_fields = ("name", "model", "base_url")
    readonly_fields = ("api_key_status", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "kind", "base_url", "model", "enabled", "is_local")}),
        ("Models", {"fields": ("chat_models", "embedding_models")}),
        (
            "Routing",
            {"fields": ("priority", "weight", "timeout_s", "max_in_flight", "context_window")},
        ),
        (
            "Capabilities",
            {
                "fields": (
                    "supports_tools",
                    "supports_thinking",
                    "supports_images",
                    "supports_json_output",
                    "token_limit_field",
                    "api_version",
                    "think",
                    "keep_alive",
                )
            },
        ),
        ("Credentials", {"fields": ("api_key_env", "api_key_status")}),
        ("Runbook", {"fields": ("runbook",)}),
        ("Prices", {"fields": ("price_input_per_1m", "price_output_per_1m")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="API key")
    def api_key_status(self, obj: Provider) -> str:
        if not obj.api_key_env:
            return "none needed"
        # Why it can't be used: not set, or a variable the secret-variable rule refuses.
        return obj.api_key_problem or "set"


class AliasEntryInline(admin.TabularInline):
    """An alias's providers, in the order they are tried (saved through `save_formset`)."""

    model = AliasEntry
    form = StrictModelForm
    fields = ("position", "provider", "model")
    ordering = ("position", "id")
    extra = 1


@admin.register(ModelAlias)
class ModelAliasAdmin(AuditedModelAdmin):
    list_display = ("name", "entries_shown", "then_cascade", "enabled", "description")
    list_filter = ("enabled", "then_cascade")
    search_fields = ("name", "description")
    readonly_fields = ("created_at", "updated_at")
    fields = ("name", "description", "enabled", "then_cascade", "created_at", "updated_at")
    inlines = (AliasEntryInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelAlias]:
        return super().get_queryset(request).prefetch_related("entries__provider")

    @admin.display(description="tried in turn")
    def entries_shown(self, obj: ModelAlias) -> str:
        return " → ".join(str(entry) for entry in obj.entries.all()) or "none"


@admin.register(FailoverPolicy)
class FailoverPolicyAdmin(AuditedModelAdmin):
    # One layout for the admin and the control room's thresholds editor: the model's own.
    fieldsets = tuple((title, {"fields": lines}) for title, lines in FailoverPolicy.FIELD_GROUPS)
    readonly_fields = ("updated_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        readonly = tuple(super().get_readonly_fields(request, obj))
        if not request.user.has_perm("providers.flip_kill_switch"):
            readonly += KILL_SWITCH_FIELDS
        return readonly

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # One row: the list would only ever hold it, so go straight to it.
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        policy = policy_get()
        return HttpResponseRedirect(
            reverse("admin:providers_failoverpolicy_change", args=[policy.pk])
        )

    record_change = staticmethod(policy_change_record)


@admin.register(StaticAnswer)
class StaticAnswerAdmin(AuditedModelAdmin):
    list_display = ("question", "enabled", "hit_count", "last_hit_at", "updated_at", "updated_by")
    list_editable = ("enabled",)
    list_filter = ("enabled",)
    search_fields = ("question", "alternative_phrasings", "answer")
    readonly_fields = ("hit_count", "last_hit_at", "updated_at", "updated_by")
    fields = (
        "question",
        "alternative_phrasings",
        "answer",
        "enabled",
        "hit_count",
        "last_hit_at",
        "updated_at",
        "updated_by",
    )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(ConfigChange)
class ConfigChangeAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "actor_name", "action", "target_type", "target_repr", "reason")
    list_filter = ("action", "target_type", "created_at")
    search_fields = ("actor_name", "target_repr", "reason")
    date_hierarchy = "created_at"


@admin.register(ClientApp)
class ClientAppAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "key_prefix_shown",
        "key_state",
        "requests_per_minute",
        "tokens_per_minute",
        "allow_cloud",
        "created_at",
    )
    list_filter = ("enabled", "allow_cloud")
    search_fields = ("name", "description", "key_prefix")
    readonly_fields = ("key_prefix_shown", "key_state", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled", "key_prefix_shown", "key_state")}),
        ("Limits", {"fields": (("requests_per_minute", "tokens_per_minute"),)}),
        (
            "What it may do",
            {
                "fields": (
                    "allowed_origins",
                    "allow_cloud",
                    "allowed_models",
                    "allow_high_priority",
                    "can_read_status",
                )
            },
        ),
        (
            "When no provider answers",
            {
                "fields": (
                    ("accept_cached", "accept_static", "accept_degraded"),
                    "shared_answer_cache",
                )
            },
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )
    actions = ("revoke_keys",)

    @admin.display(description="key")
    def key_prefix_shown(self, obj: ClientApp) -> str:
        return f"{obj.key_prefix}…" if obj.key_prefix else "made when the app is saved"

    @admin.display(description="state")
    def key_state(self, obj: ClientApp) -> str:
        if obj.revoked_at is not None:
            return f"revoked {obj.revoked_at:%Y-%m-%d %H:%M}"
        return "enabled" if obj.enabled else "disabled"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        _, key = client_app_create(actor=request.user, app=obj)
        request._client_key = key  # type: ignore[attr-defined] # shown by response_add, once

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: str | None = None
    ) -> HttpResponse:
        key = getattr(request, "_client_key", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        # The key goes straight into this page, never into a message or a session: nothing
        # keeps it after this response.
        response = TemplateResponse(
            request,
            "admin/providers/clientapp/key_created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "app": obj,
                "key": key,
                "title": f"The key of {obj.name}",
            },
        )
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected apps' keys", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ClientApp]) -> None:
        revoked = sum(
            client_app_revoke(app=app, actor=request.user, reason="revoked in the admin")
            for app in queryset
        )
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)
