"""The browser's front door: `GET /`, what is running and where to go from here,
`GET /docs/api/`, the OpenAPI document as readable HTML, and `GET /favicon.ico`, the icon every
page names (for a client that asks the old place anyway).

Both are served by the full stack (outside /api/ and /v1/, so the pages' Content-Security-Policy
applies: one stylesheet from this origin, no script) and run no SQL. The front page says the
product, its version and its mode, read from settings by name, never a value that could hold a
secret (no URL, host, user or key). The reference is built once per process from the very
document /api/openapi.json serves (`edge.api.openapi.openapi_document`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from edge.api.openapi import openapi_document
from edge.api_reference import reference_build

# The distribution pyproject.toml names; its installed metadata carries the version.
DISTRIBUTION = "failover-platform"
# The database by its engine's name only: the rest of DATABASES (host, user, password) is
# never read here.
DATABASE_NAMES = {
    "django.db.backends.sqlite3": "SQLite",
    "django.db.backends.postgresql": "PostgreSQL",
}
STATE_NAMES = {"memory": "in-process state", "redis": "Redis"}


@dataclass(frozen=True)
class Deployment:
    mode: str  # "embedded" or "production"
    database: str  # "SQLite", "PostgreSQL"
    state: str  # "in-process state", "Redis"


def deployment_read() -> Deployment:
    """The mode as `manage.py bootstrap` tells it: embedded is DEBUG on with the shared state in
    this process; DEBUG off or the state in Redis is a production deployment."""
    engine = str(settings.DATABASES["default"]["ENGINE"])
    backend = str(settings.STATE_BACKEND)
    embedded = settings.DEBUG and backend == "memory"
    return Deployment(
        mode="embedded" if embedded else "production",
        database=DATABASE_NAMES.get(engine, engine.rpartition(".")[2]),
        state=STATE_NAMES.get(backend, backend),
    )


@functools.cache
def version() -> str:
    """The installed package's version; "" when it runs from a tree that isn't installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return ""


# Both pages change nothing and read no form: another method is a 405 naming GET and HEAD, not
# the CSRF check's 403 page (as the probes).
@csrf_exempt
@require_safe
async def index(request: HttpRequest) -> HttpResponse:
    document = openapi_document()
    return render(
        request,
        "front/index.html",
        {
            "title": document["info"]["title"],
            "version": version(),
            "api_version": document["info"]["version"],
            "deployment": deployment_read(),
        },
    )


@functools.cache
def reference_page() -> str:
    """The reference's HTML. The document is built once per process, so its rendering is too:
    some 200 kB of nested lists, a few tenths of a second to render."""
    return render_to_string(
        "front/api_reference.html", {"reference": reference_build(openapi_document())}
    )


@csrf_exempt
@require_safe
async def api_reference(request: HttpRequest) -> HttpResponse:
    # Off the event loop: the first request renders the page, and the requests in flight on
    # this process's loop must not wait for it.
    return HttpResponse(await sync_to_async(reference_page, thread_sensitive=False)())


@csrf_exempt
@require_safe
async def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponseRedirect(static("favicon.svg"))
