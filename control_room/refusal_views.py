"""The last refusals: requests the front doors turned away before routing (a 4xx: bad JSON, an
unknown field, a wrong key, a rate limit...), as the shared state keeps a sample of them
(`runtime/refusals.py`), newest first, with what they have most in common. Read from the shared
state, so every serving process's show, whichever one answers the page; htmx refreshes the
list in place, and the page works without it. It takes the live status's permission: it names
the client apps and what they get wrong."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from asgiref.sync import async_to_sync
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET

from gateway.state.refusal_log import REFUSALS_KEPT, RefusalNote
from providers.permissions import status_viewer
from runtime.gateway import Gateway, NotServing, gateway_of
from runtime.refusals import KEEP_PER_S, METRIC

TEMPLATE = "control/refusals.html"
SHOWN = 100  # rows on the page, of the store's REFUSALS_KEPT
MOST_COMMON = 8


def urls(site: AdminSite) -> list[URLPattern]:
    @require_GET
    def refusals_page(request: HttpRequest) -> TemplateResponse:
        return refusals_view(request, site=site)

    return [path("control/refusals/", site.admin_view(refusals_page), name="control-refusals")]


@dataclass(frozen=True, slots=True)
class RefusalRow:
    note: RefusalNote
    at: datetime


@dataclass(frozen=True, slots=True)
class Common:
    """What several of the refusals shown share, and how many do."""

    door: str
    app: str
    code: str
    field: str
    count: int


def last_refusals(gateway: Gateway, count: int = SHOWN) -> list[RefusalRow]:
    """The last `count` refusals kept, newest first (sync: the admin's views are)."""
    notes = async_to_sync(gateway.store.refusals_read)(count)
    return [RefusalRow(note, datetime.fromtimestamp(note.at, tz=UTC)) for note in notes]


def most_common(rows: list[RefusalRow]) -> list[Common]:
    tally = Counter((r.note.door, r.note.app, r.note.code, r.note.field) for r in rows)
    return [Common(*key, count) for key, count in tally.most_common(MOST_COMMON) if count > 1]


def refusals_view(request: HttpRequest, *, site: AdminSite) -> TemplateResponse:
    if not status_viewer(request.user):
        raise PermissionDenied("The last refusals take the live status's permission.")
    try:
        gateway: Gateway | None = gateway_of(request)
    except NotServing:
        gateway = None
    rows = last_refusals(gateway) if gateway is not None else []
    context = {
        **site.each_context(request),
        "title": "Refused requests",
        "serving": gateway is not None,
        "rows": rows,
        "common": most_common(rows),
        "metric": f"{METRIC}_total",
        "per_s": KEEP_PER_S,
        "kept": REFUSALS_KEPT,
        "shown": SHOWN,
    }
    template = f"{TEMPLATE}#refusals" if getattr(request, "htmx", False) else TEMPLATE
    return TemplateResponse(request, template, context)
