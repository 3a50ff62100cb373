from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from alerts.delivery import send_test_alert
from alerts.models import AlertChannel, AlertEvent
from providers.admin_audit import AuditedModelAdmin, ReadOnlyModelAdmin
from providers.models.secret_env import secret_env_read


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@admin.register(AlertChannel)
class AlertChannelAdmin(AuditedModelAdmin):
    list_display = (
        "name",
        "kind",
        "min_severity",
        "enabled",
        "last_sent_at",
        "last_error_short",
        "last_error_at",
        "disabled_reason_short",
    )
    list_filter = ("kind", "enabled", "min_severity")
    search_fields = ("name", "last_error", "disabled_reason")
    formfield_overrides = {
        models.JSONField: {
            "widget": forms.Textarea(
                # A class, not a style attribute: the admin's Content-Security-Policy.
                attrs={"rows": 6, "cols": 80, "class": "monospace"}
            )
        }
    }
    readonly_fields = (
        "secret_status",
        "last_sent_at",
        "last_error",
        "last_error_at",
        "disabled_at",
        "disabled_reason",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "kind", "config", "secret_status", "min_severity", "enabled")}),
        (
            "Health",
            {
                "fields": (
                    "last_sent_at",
                    ("last_error", "last_error_at"),
                    ("disabled_reason", "disabled_at"),
                )
            },
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )
    actions = ["send_test_alerts"]

    @admin.display(description="last error", ordering="last_error_at")
    def last_error_short(self, obj: AlertChannel) -> str:
        return _short(obj.last_error) if obj.last_error else "—"

    @admin.display(description="disabled because")
    def disabled_reason_short(self, obj: AlertChannel) -> str:
        return _short(obj.disabled_reason) if obj.disabled_reason else "—"

    @admin.display(description="secrets")
    def secret_status(self, obj: AlertChannel) -> str:
        names = obj.secret_envs
        if not names:
            return "none needed"
        # A name the secret-variable rule refuses shows why, and reads as not set.
        return "; ".join(secret_env_read(name)[1] or f"{name} is set" for name in names)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # Switching a channel back on is the operator saying its problem is fixed.
        if obj.enabled and (obj.disabled_at or obj.disabled_reason):
            obj.disabled_at, obj.disabled_reason = None, ""
        super().save_model(request, obj, form, change)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/send-test-alert/",
                self.admin_site.admin_view(self.send_test_view),
                name="alerts_alertchannel_send_test",
            ),
            *super().get_urls(),
        ]

    def send_test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The change page's "Send a test alert" button."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        channel = self.get_object(request, unquote(object_id))
        if not isinstance(channel, AlertChannel):
            raise Http404("No such channel.")
        if not self.has_change_permission(request, channel):
            raise PermissionDenied
        self._send_test(request, channel)
        return redirect(reverse("admin:alerts_alertchannel_change", args=[channel.pk]))

    @admin.action(description="Send a test alert", permissions=["change"])
    def send_test_alerts(self, request: HttpRequest, queryset: QuerySet[AlertChannel]) -> None:
        for channel in queryset.order_by("name"):
            self._send_test(request, channel)

    def _send_test(self, request: HttpRequest, channel: AlertChannel) -> None:
        event = send_test_alert(channel, requested_by=request.user.get_username())
        result: dict[str, Any] = next(iter(event.deliveries), {})
        if result.get("ok"):
            self.message_user(request, f"Test alert sent to {channel.name}.", messages.SUCCESS)
            return
        text = f"Test alert to {channel.name} failed: {result.get('error') or 'no result'}"
        if result.get("permanent"):
            text += " The channel has been switched off until it is fixed and switched on again."
        self.message_user(request, text, messages.ERROR)


DELIVERY_COLUMNS = ("channel", "kind", "ok", "attempts", "error", "at")


@admin.register(AlertEvent)
class AlertEventAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "kind",
        "severity",
        "status",
        "title",
        "key",
        "delivery_summary",
    )
    list_filter = ("kind", "severity", "status", "created_at")
    search_fields = ("key", "title", "message")
    date_hierarchy = "created_at"
    show_full_result_count = False  # events accumulate; skip the full COUNT(*)
    readonly_fields = ("deliveries_table", "data_pretty")
    fieldsets = (
        (None, {"fields": ("created_at", "kind", "severity", "key", "title", "message")}),
        ("Outcome", {"fields": ("status", "suppressed_reason", "deliveries_table")}),
        ("Data", {"fields": ("data_pretty",)}),
    )

    @admin.display(description="deliveries")
    def delivery_summary(self, obj: AlertEvent) -> str:
        if obj.suppressed_reason:
            return f"suppressed: {obj.suppressed_reason}"
        entries = [e for e in obj.deliveries or [] if isinstance(e, dict)]
        if not entries:
            return "—"
        return ", ".join(
            f"{e.get('channel')} {'✓' if e.get('ok') else '✗'}"
            + ("" if e.get("attempts", 1) == 1 else f" ({e.get('attempts')} attempts)")
            for e in entries
        )

    @admin.display(description="deliveries")
    def deliveries_table(self, obj: AlertEvent) -> SafeString | str:
        entries = [e for e in obj.deliveries or [] if isinstance(e, dict)]
        if not entries:
            return "Not sent to any channel."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (tuple(_delivery_cell(entry, key) for key in DELIVERY_COLUMNS) for entry in entries),
        )
        return format_html(
            '<table class="alert-deliveries"><thead><tr><th scope="col">channel</th>'
            '<th scope="col">kind</th><th scope="col">result</th><th scope="col">attempts</th>'
            '<th scope="col">error</th><th scope="col">at</th></tr></thead>'
            "<tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="data")
    def data_pretty(self, obj: AlertEvent) -> SafeString | str:
        if not obj.data:
            return "—"
        return format_html(
            '<pre class="alert-event-data">{}</pre>',
            json.dumps(obj.data, indent=2, ensure_ascii=False),
        )


def _delivery_cell(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if key == "ok":
        if value:
            return "delivered"
        return "failed (permanent: channel switched off)" if entry.get("permanent") else "failed"
    if value is None or value == "":
        return "—"
    return str(value)
