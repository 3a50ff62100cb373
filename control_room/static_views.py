"""The static-answer workbench: the answers with their hits, edited in place, a box to try a
question against the matcher the router uses, and what the ledger says about the static tier."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import trigger_client_event

from control_room.static_queries import (
    DEFAULT_SORT,
    SORTS,
    static_answer_list,
    static_coverage,
    static_trial,
    unmatched_questions,
)
from providers.form_input import FormInput, bad_request
from providers.models import StaticAnswer
from providers.selectors import policy_get
from providers.services.static_answers import static_answer_update

VIEW_PERMISSION = "providers.view_staticanswer"
CHANGE_PERMISSION = "providers.change_staticanswer"
ADD_PERMISSION = "providers.add_staticanswer"
TEMPLATE = "control/static_workbench.html"
LEDGER_WINDOW = timedelta(days=7)
# Tells the try-a-question box to ask again: the answer it showed may just have changed.
SAVED_EVENT = "static-answer-saved"
EDITABLE_FIELDS = ("question", "alternative_phrasings", "answer", "enabled")
# The search box and the try-a-question box: a question's length, with room.
MAX_QUERY_CHARS = 1000


def urls(site: AdminSite) -> list[URLPattern]:
    return [
        path(
            "control/static/",
            site.admin_view(partial(workbench, site=site)),
            name="control-static",
        ),
        path("control/static/list/", site.admin_view(answer_list), name="control-static-list"),
        path("control/static/try/", site.admin_view(try_question), name="control-static-try"),
        path("control/static/<int:pk>/", site.admin_view(answer_row), name="control-static-row"),
        path(
            "control/static/<int:pk>/edit/",
            site.admin_view(answer_edit),
            name="control-static-edit",
        ),
    ]


def edit_values(given: FormInput) -> dict[str, Any]:
    """The edit form's fields as the model holds them: phrasings one per line, no blank lines.
    A field it refuses (a NUL character, several values) is in `given.errors`."""
    lines = (line.strip() for line in given.text("alternative_phrasings").splitlines())
    return {
        "question": given.text("question").strip(),
        "alternative_phrasings": "\n".join(line for line in lines if line),
        "answer": given.text("answer").strip(),
        "enabled": given.choice("enabled", ("", "on"), default="") == "on",
    }


# Permissions and context -------------------------------------------------------------------


def _can_view(request: HttpRequest) -> bool:
    # As in the admin, whoever may change answers may also see them.
    return request.user.has_perm(VIEW_PERMISSION) or request.user.has_perm(CHANGE_PERMISSION)


def _require_view(request: HttpRequest) -> None:
    if not _can_view(request):
        raise PermissionDenied("Seeing static answers takes the static answer view permission.")


def _require_change(request: HttpRequest) -> None:
    if not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied("Editing static answers takes the static answer change permission.")


def _list_options(given: FormInput) -> tuple[str, str]:
    """The list's search text and sort order, as the query string gives them."""
    search = given.text("q", max_length=MAX_QUERY_CHARS).strip()
    return search, given.choice("sort", SORTS, default=DEFAULT_SORT)


def _list_context(request: HttpRequest, search: str, sort: str) -> dict[str, Any]:
    return {
        "answers": static_answer_list(search=search, sort=sort),
        "q": search,
        "sort": sort,
        "can_change": request.user.has_perm(CHANGE_PERMISSION),
    }


def _trial_context(question: str) -> dict[str, Any]:
    question = question.strip()
    return {"ask": question, "trial": static_trial(question=question) if question else None}


def _ledger_context(request: HttpRequest) -> dict[str, Any]:
    since = timezone.now() - LEDGER_WINDOW
    policy = policy_get()
    return {
        "policy": policy,
        "window_days": LEDGER_WINDOW.days,
        "coverage": static_coverage(since=since),
        "unmatched": unmatched_questions(since=since) if policy.store_prompts else None,
        "can_add": request.user.has_perm(ADD_PERMISSION),
    }


def _render(
    request: HttpRequest, partial_name: str, context: dict[str, Any], status: int = 200
) -> TemplateResponse:
    return TemplateResponse(request, f"{TEMPLATE}#{partial_name}", context, status=status)


def _row(request: HttpRequest, answer: StaticAnswer, **extra: Any) -> TemplateResponse:
    context = {
        "answer": answer,
        "can_change": request.user.has_perm(CHANGE_PERMISSION),
        **extra,
    }
    return _render(request, "row", context)


# The views ---------------------------------------------------------------------------------


@require_GET
def workbench(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """The whole page; without JavaScript its forms are plain GETs of this page."""
    _require_view(request)
    given = FormInput(request.GET)
    search, sort = _list_options(given)
    ask = given.text("ask", max_length=MAX_QUERY_CHARS)
    if given.errors:
        return bad_request(given.errors)
    context = {
        **site.each_context(request),
        "title": "Static answers",
        **_list_context(request, search, sort),
        **_trial_context(ask),
        **_ledger_context(request),
    }
    return TemplateResponse(request, TEMPLATE, context)


@require_GET
def answer_list(request: HttpRequest) -> HttpResponse:
    _require_view(request)
    given = FormInput(request.GET)
    search, sort = _list_options(given)
    if given.errors:
        return bad_request(given.errors)
    return _render(request, "list", _list_context(request, search, sort))


@require_GET
def try_question(request: HttpRequest) -> HttpResponse:
    _require_view(request)
    given = FormInput(request.GET)
    ask = given.text("ask", max_length=MAX_QUERY_CHARS)
    if given.errors:
        return bad_request(given.errors)
    return _render(request, "try-result", _trial_context(ask))


@require_GET
def answer_row(request: HttpRequest, pk: int) -> HttpResponse:
    """The read-only row (the edit form's Cancel)."""
    _require_view(request)
    return _row(request, get_object_or_404(StaticAnswer, pk=pk))


@require_http_methods(["GET", "POST"])
def answer_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the row's edit form. POST: save it, and answer with the read-only row, or with the
    form and its errors (422) when the model refuses it."""
    _require_change(request)
    answer = get_object_or_404(StaticAnswer, pk=pk)
    if request.method == "GET":
        form = {name: getattr(answer, name) for name in EDITABLE_FIELDS}
        return _render(request, "edit-row", {"answer": answer, "form": form})
    given = FormInput(request.POST)
    values = edit_values(given)
    try:
        if given.errors:
            raise ValidationError(given.errors)
        saved = static_answer_update(answer=answer, values=values, actor=request.user)
    except ValidationError as exc:
        errors = exc.message_dict
        context = {
            "answer": answer,
            "form": values,
            "errors": errors,
            "non_field_errors": errors.get(NON_FIELD_ERRORS, []),
        }
        return _render(request, "edit-row", context, status=422)
    return trigger_client_event(_row(request, saved, saved=True), SAVED_EVENT)
