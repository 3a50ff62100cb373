from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from billing.models import Budget, CallRecord
from providers.admin_audit import AuditedModelAdmin, ReadOnlyModelAdmin


@admin.register(Budget)
class BudgetAdmin(AuditedModelAdmin):
    list_display = (
        "__str__",
        "scope",
        "period",
        "unit",
        "cap",
        "warn_pct",
        "high_priority_only_pct",
        "hard_stop_pct",
        "enabled",
    )
    list_filter = ("scope", "period", "unit", "enabled")
    list_select_related = ("provider", "client_app")
    fieldsets = (
        (None, {"fields": ("scope", "provider", "client_app", "period", "enabled")}),
        ("Cap", {"fields": ("unit", "cap")}),
        ("Levels", {"fields": ("warn_pct", "high_priority_only_pct", "hard_stop_pct")}),
    )


NO_PROVIDER = "_none"


class FinalProviderFilter(admin.SimpleListFilter):
    """The providers that answered something in the ledger, as it stands (a provider removed
    from the registry still has its past requests), plus "none" for the fallback tiers."""

    title = "provider"
    parameter_name = "provider"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Served by the (final_provider, created_at) index: a distinct over its leading column.
        names = (
            CallRecord.objects.exclude(final_provider="")
            .order_by("final_provider")
            .values_list("final_provider", flat=True)
            .distinct()
        )
        return [(name, name) for name in names] + [(NO_PROVIDER, "none (a fallback tier)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(final_provider="" if value == NO_PROVIDER else value)


class RecentFilter(admin.SimpleListFilter):
    """Relative windows, for "what just happened"; the date hierarchy covers calendar days."""

    title = "time"
    parameter_name = "recent"
    WINDOWS = {
        "1h": ("last hour", timedelta(hours=1)),
        "24h": ("last 24 h", timedelta(hours=24)),
        "7d": ("last 7 days", timedelta(days=7)),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in self.WINDOWS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        window = self.WINDOWS.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - window[1])


ATTEMPT_COLUMNS = ("provider", "outcome", "error_class", "status", "latency_ms", "detail")


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyModelAdmin):
    """The call ledger: every routed request, filterable the ways an incident is read."""

    list_display = (
        "time",
        "tier_code",
        "provider",
        "outcome_code",
        "reason",
        "status",
        "latency",
        "cost",
    )
    list_display_links = ("time",)
    list_filter = (
        FinalProviderFilter,
        "tier",
        "outcome",
        "cache_hit",
        RecentFilter,
        "priority",
    )
    search_fields = ("=request_id", "client", "task", "reason")
    search_help_text = "A request id, or words from the client, task or reason."
    date_hierarchy = "created_at"
    show_full_result_count = False  # the ledger grows without bound; skip the full COUNT(*)
    readonly_fields = ("client_link", "attempts_table")
    fieldsets = (
        (None, {"fields": ("request_id", "created_at", "client_link", "priority", "task")}),
        (
            "Outcome",
            {"fields": ("tier", "final_provider", "outcome", "reason", "status", "latency_ms")},
        ),
        ("Attempts", {"fields": ("attempts_table",)}),
        (
            "Tokens and cost",
            {
                "fields": (
                    "tokens_in",
                    "tokens_out",
                    "tokens_estimated",
                    "cost",
                    "cache_hit",
                    "static_answer",
                )
            },
        ),
        ("Prompt", {"fields": ("prompt_hash", "prompt")}),
    )

    @admin.display(description="time", ordering="created_at")
    def time(self, obj: CallRecord) -> Any:
        return obj.created_at

    @admin.display(description="tier", ordering="tier")
    def tier_code(self, obj: CallRecord) -> SafeString:
        return format_html('<span title="{}">{}</span>', obj.get_tier_display(), obj.tier)

    @admin.display(description="provider", ordering="final_provider")
    def provider(self, obj: CallRecord) -> str | None:
        return obj.final_provider or None

    @admin.display(description="outcome", ordering="outcome")
    def outcome_code(self, obj: CallRecord) -> SafeString:
        return format_html('<span title="{}">{}</span>', obj.get_outcome_display(), obj.outcome)

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, obj: CallRecord) -> str:
        return f"{obj.latency_ms:,} ms"

    @admin.display(description="client")
    def client_link(self, obj: CallRecord) -> SafeString | str:
        if not obj.client:
            return "—"
        url = reverse("admin:billing_callrecord_changelist")
        return format_html(
            '{} <a class="ledger-client-link" href="{}?{}">every request from this client</a>',
            obj.client,
            url,
            urlencode({"client__exact": obj.client}),
        )

    @admin.display(description="attempts")
    def attempts_table(self, obj: CallRecord) -> SafeString | str:
        attempts = [a for a in obj.attempts or [] if isinstance(a, dict)]
        if not attempts:
            return "No provider was tried: the answer came from a fallback tier."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td></tr>",
            (
                (number, *(_attempt_cell(attempt, key) for key in ATTEMPT_COLUMNS))
                for number, attempt in enumerate(attempts, start=1)
            ),
        )
        return format_html(
            '<table class="ledger-attempts"><thead><tr><th scope="col">#</th>'
            '<th scope="col">provider</th><th scope="col">outcome</th>'
            '<th scope="col">error class</th><th scope="col">status</th>'
            '<th scope="col">latency</th><th scope="col">detail</th></tr></thead>'
            "<tbody>{}</tbody></table>",
            rows,
        )


def _attempt_cell(attempt: dict[str, Any], key: str) -> str:
    value = attempt.get(key)
    if value is None or value == "":
        return "—"
    if key == "latency_ms":
        return f"{value:,} ms" if isinstance(value, int | float) else str(value)
    return str(value)
