from __future__ import annotations

from django.contrib import admin

from providers.admin_audit import AuditedModelAdmin, ReadOnlyModelAdmin

from .models import Budget, CallRecord


@admin.register(Budget)
class BudgetAdmin(AuditedModelAdmin):
    list_display = (
        "__str__",
        "scope",
        "period",
        "cap",
        "currency",
        "warn_pct",
        "high_priority_only_pct",
        "hard_stop_pct",
        "enabled",
    )
    list_filter = ("scope", "period", "enabled")
    list_select_related = ("provider",)
    fieldsets = (
        (None, {"fields": ("scope", "provider", "client", "period", "enabled")}),
        ("Cap", {"fields": ("cap", "currency")}),
        ("Levels", {"fields": ("warn_pct", "high_priority_only_pct", "hard_stop_pct")}),
    )


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "request_id",
        "final_provider",
        "tier",
        "outcome",
        "status",
        "latency_ms",
        "tokens_in",
        "tokens_out",
        "cost",
        "reason",
    )
    list_filter = ("tier", "outcome", "final_provider", "priority", "created_at")
    search_fields = ("=request_id", "client", "task", "reason")
    date_hierarchy = "created_at"
    show_full_result_count = False  # the ledger grows without bound; skip the full COUNT(*)
