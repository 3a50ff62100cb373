"""Every handler of the admin site, as the fuzz test drives it: read from the URL resolver, so a
new page or a new model admin is fuzzed the day it is added (or the test fails until it is
described here), with the fields each one reads and a valid form to start from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, SEARCH_VAR, TO_FIELD_VAR
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.http import HttpRequest
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, reverse

from alerts.models import AlertChannel
from billing.roi import LABELS
from control_room.static_views import EDITABLE_FIELDS
from providers.models import Provider, StaticAnswer
from providers.selectors import policy_get
from providers.services.policy import INITIAL_PREFIX, ThresholdsForm, threshold_names
from tests.serving import ServingClient

PASSWORD = "a-long-test-password-1"
# Django's own account models: their admin is Django's, not this project's.
NOT_OURS = ("auth",)
# Pages any staff member may use, whatever their permissions.
OPEN_TO_STAFF = {
    "index",
    "login",
    "logout",
    "password_change",
    "password_change_done",
    "jsi18n",
    "view_on_site",
    "app_list",
    "autocomplete",
    "catch_all",
}
# A model admin's own views (its get_urls), by the model they act on.
OWN_VIEWS = {"alerts_alertchannel_send_test": AlertChannel}
ADMIN_GET_FIELDS = (TO_FIELD_VAR, "_popup", "_changelist_filters")


@dataclass(frozen=True)
class Form:
    """One way a handler is called: a method, and a valid request to start from."""

    method: str
    data: dict[str, Any]
    fields: tuple[str, ...]  # what the handler reads: each is fuzzed
    # Read by the same Django code on every model's page: a few hostile values are enough.
    light: bool = False


ADMIN_GET = Form("GET", {}, ADMIN_GET_FIELDS, light=True)


@dataclass
class Target:
    """One handler: its URL, valid and hostile path arguments, and the ways it is called."""

    key: str  # the URL's name, or the route when it has none
    url: Callable[[dict[str, str]], str]
    kwargs: dict[str, str]  # valid path arguments
    hostile_kwargs: list[dict[str, str]] = field(default_factory=list)
    forms: list[Form] = field(default_factory=list)

    def address(self, kwargs: dict[str, str]) -> str:
        """The URL with these path arguments, valid for its route or not (reverse() would
        refuse the hostile ones)."""
        url = self.url(self.kwargs)
        for name, value in kwargs.items():
            if value != self.kwargs[name]:
                url = url.replace("/" + self.kwargs[name], "/" + quote(value, safe="/"), 1)
        return url


def admin_patterns() -> Iterator[tuple[str, URLPattern]]:
    """(key, pattern) for every URL of the admin site, the control room's included."""

    def walk(patterns: list[Any]) -> Iterator[URLPattern]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
            else:
                yield pattern

    for pattern in walk(admin.site.get_urls()):
        key = pattern.name or str(pattern.pattern)
        if key == "(?P<url>.*)$":
            key = "catch_all"
        model_admin = getattr(pattern.callback, "model_admin", None)
        if model_admin is not None and pattern.name is None:
            key = f"{model_admin.opts.app_label}_{model_admin.opts.model_name}_redirect"
        if key.startswith(tuple(f"{label}_" for label in NOT_OURS)):
            continue
        yield key, pattern


def target_for(key: str, pattern: URLPattern, client: ServingClient) -> Target:
    model_admin = getattr(pattern.callback, "model_admin", None)
    if model_admin is None and key in OWN_VIEWS:
        model_admin = admin.site.get_model_admin(OWN_VIEWS[key])
    if model_admin is not None:
        return _model_admin_target(key, model_admin, client)
    if key in CONTROL:
        return CONTROL[key]()
    if key in SITE:
        return SITE[key]()
    raise LookupError(f"{key}: an admin handler the fuzz test doesn't know; describe it here")


def by_name(name: str) -> Callable[[dict[str, str]], str]:
    return lambda kwargs: reverse(f"admin:{name}", kwargs=kwargs)


def form_values(form: forms.BaseForm) -> dict[str, Any]:
    """A form's current values as a browser posts them (an unticked box is left out)."""
    data: dict[str, Any] = {}
    for name in form.fields:
        value = form[name].value()
        key = form.add_prefix(name)
        if isinstance(form.fields[name], forms.BooleanField):
            if value:
                data[key] = "on"
            continue
        if isinstance(value, list | tuple):
            data[key] = [str(getattr(item, "pk", item)) for item in value]
        else:
            data[key] = "" if value is None else str(getattr(value, "pk", value))
    return data


# The control room -------------------------------------------------------------------------

THRESHOLD_FIELDS = (*threshold_names(), *(INITIAL_PREFIX + name for name in threshold_names()))
REPORT_FIELDS = ("since", "until", "by", "group")


def _thresholds_data() -> dict[str, Any]:
    """The thresholds form as loaded: each field with the value it was loaded with."""
    data = form_values(ThresholdsForm(instance=policy_get()))
    return data | {INITIAL_PREFIX + name: value for name, value in data.items()}


def _static_edit_data() -> dict[str, Any]:
    answer = StaticAnswer.objects.order_by("pk").first()
    assert answer is not None
    data = {name: getattr(answer, name) for name in EDITABLE_FIELDS if name != "enabled"}
    return data | {"enabled": "on"}


def _control(
    name: str,
    *,
    get: tuple[str, ...] = (),
    post: tuple[str, ...] | None = None,
    post_data: Callable[[], dict[str, Any]] = dict,
    kwargs: Callable[[], dict[str, str]] = dict,
    hostile_kwargs: tuple[dict[str, str], ...] = (),
) -> Callable[[], Target]:
    def build() -> Target:
        found = [Form("GET", {}, get)]
        if post is not None:
            found.append(Form("POST", post_data(), post))
        valid = kwargs()
        hostile = [valid | bad for bad in hostile_kwargs]
        return Target(name, by_name(name), valid, hostile, found)

    return build


def _provider_pk() -> str:
    return str(Provider.objects.order_by("pk").values_list("pk", flat=True)[0])


def _answer_pk() -> str:
    return str(StaticAnswer.objects.order_by("pk").values_list("pk", flat=True)[0])


BAD_INT_KWARGS = ({"pk": "0"}, {"pk": "9" * 30}, {"pk": "99999"})
CONTROL: dict[str, Callable[[], Target]] = {
    "control-status": _control("control-status"),
    "control-kill-switch": _control(
        "control-kill-switch",
        post=("mode", "provider", "reason"),
        post_data=lambda: {"mode": "off", "provider": "", "reason": "back to normal"},
    ),
    "control-provider-action": _control(
        "control-provider-action",
        post=(),
        kwargs=lambda: {"pk": _provider_pk(), "action": "disable"},
        hostile_kwargs=(*BAD_INT_KWARGS, {"action": "explode"}, {"action": "²"}),
    ),
    "control-thresholds": _control("control-thresholds"),
    "control-thresholds-save": _control(
        "control-thresholds-save", post=THRESHOLD_FIELDS, post_data=_thresholds_data
    ),
    "control-thresholds-reset": _control(
        "control-thresholds-reset",
        post=THRESHOLD_FIELDS,
        post_data=_thresholds_data,
        kwargs=lambda: {"name": threshold_names()[0]},
        hostile_kwargs=({"name": "²"}, {"name": "kill_switch"}),
    ),
    "control-static": _control("control-static", get=("q", "sort", "ask")),
    "control-static-list": _control("control-static-list", get=("q", "sort")),
    "control-static-try": _control("control-static-try", get=("ask",)),
    "control-static-row": _control(
        "control-static-row", kwargs=lambda: {"pk": _answer_pk()}, hostile_kwargs=BAD_INT_KWARGS
    ),
    "control-static-edit": _control(
        "control-static-edit",
        post=EDITABLE_FIELDS,
        post_data=_static_edit_data,
        kwargs=lambda: {"pk": _answer_pk()},
        hostile_kwargs=BAD_INT_KWARGS,
    ),
    "control-charts": _control("control-charts"),
    "control-refusals": _control("control-refusals"),
    "control-roi": _control("control-roi", get=("days", *LABELS)),
    "control-reports": _control("control-reports", get=REPORT_FIELDS),
    "control-reports-csv": _control(
        "control-reports-csv",
        get=REPORT_FIELDS,
        kwargs=lambda: {"report": "spend"},
        hostile_kwargs=({"report": "nope"}, {"report": "_"}),
    ),
}


# The admin site's own pages ---------------------------------------------------------------


def _site(
    name: str,
    *,
    get: tuple[str, ...] = (),
    post: Form | None = None,
    kwargs: Callable[[], dict[str, str]] = dict,
    hostile_kwargs: tuple[dict[str, str], ...] = (),
) -> Callable[[], Target]:
    def build() -> Target:
        found = [Form("GET", {}, get), *([post] if post else [])]
        return Target(name, by_name(name), kwargs(), list(hostile_kwargs), found)

    return build


def _view_on_site_kwargs() -> dict[str, str]:
    kind = ContentType.objects.get_for_model(Provider)
    return {"content_type_id": str(kind.pk), "object_id": _provider_pk()}


def _catch_all() -> Target:
    return Target(
        "catch_all",
        lambda kwargs: "/admin/" + kwargs["url"],
        {"url": "nowhere/"},
        [{"url": "²/"}, {"url": "9" * 30 + "/"}, {"url": "providers/provider/x"}],
        [Form("GET", {}, ()), Form("POST", {}, ())],
    )


PASSWORDS = ("old_password", "new_password1", "new_password2")
SITE: dict[str, Callable[[], Target]] = {
    "index": _site("index"),
    "login": _site(
        "login",
        get=("next",),
        post=Form(
            "POST",
            {"username": "fuzz-admin", "password": PASSWORD, "next": "/admin/"},
            ("username", "password", "next"),
        ),
    ),
    "logout": _site("logout", post=Form("POST", {}, ("next",))),
    "password_change": _site(
        "password_change", post=Form("POST", dict.fromkeys(PASSWORDS, PASSWORD), PASSWORDS)
    ),
    "password_change_done": _site("password_change_done"),
    "jsi18n": _site("jsi18n"),
    "autocomplete": _site(
        "autocomplete", get=("term", "app_label", "model_name", "field_name", "page")
    ),
    "view_on_site": _site(
        "view_on_site",
        kwargs=_view_on_site_kwargs,
        hostile_kwargs=(
            {"content_type_id": "²", "object_id": "1"},
            {"content_type_id": "9" * 30, "object_id": "9" * 30},
        ),
    ),
    "app_list": _site("app_list", kwargs=lambda: {"app_label": "providers"}),
    "catch_all": _catch_all,
}


# The model admins -------------------------------------------------------------------------

BAD_OBJECT_IDS = ("²", "9" * 30, "-1", "abc")


def _first(model: type[Model]) -> Model:
    row = model._default_manager.order_by("pk").first()
    assert row is not None, f"the fuzz test needs a {model.__name__} to change"
    return row


def _form_data(client: ServingClient, url: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An add or change page's form and inline forms as the browser posts them."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    data = form_values(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update(form_values(formset.management_form))
        for form in formset.forms:
            data.update(form_values(form))
    data["_save"] = "Save"
    return data, tuple(data)


def _changelist_forms(client: ServingClient, url: str, model_admin: admin.ModelAdmin) -> list[Form]:
    response = client.get(url)
    # Any field of the model is a filter too: `?id=` is one.
    query = [SEARCH_VAR, ORDER_VAR, PAGE_VAR, "all", "e", "id", *ADMIN_GET_FIELDS]
    if response.status_code == 302:  # a list of one row goes straight to it
        return [Form("GET", {}, tuple(query))]
    assert response.status_code == 200, (url, response.status_code)
    changelist = response.context["cl"]
    for spec in changelist.filter_specs:
        query += spec.expected_parameters()
    if model_admin.date_hierarchy:
        query += [f"{model_admin.date_hierarchy}__{part}" for part in ("year", "month", "day")]
    found = [Form("GET", {}, tuple(query))]
    pk = str(_first(model_admin.model).pk)
    actions = [name for name, _ in model_admin.get_action_choices(response.asgi_request)[1:]]
    for action in actions:
        data = {"action": action, "_selected_action": pk, "index": "0"}
        found.append(Form("POST", data, ("action", "_selected_action", "index", "select_across")))
    if changelist.formset is not None:
        data = form_values(changelist.formset.management_form)
        for form in changelist.formset.forms:
            data.update(form_values(form))
        data["_save"] = "Save"
        found.append(Form("POST", data, tuple(data)))
    return found


def _model_admin_target(key: str, model_admin: admin.ModelAdmin, client: ServingClient) -> Target:
    opts = model_admin.opts
    prefix = f"{opts.app_label}_{opts.model_name}_"
    kind = key.removeprefix(prefix)
    if kind == "changelist":
        url = reverse(f"admin:{key}")
        return Target(key, by_name(key), {}, [], _changelist_forms(client, url, model_admin))
    if kind == "add":
        if model_admin.has_add_permission(_request_as(client)):
            data, fields = _form_data(client, reverse(f"admin:{key}"))
            post = Form("POST", data, fields)
        else:
            post = Form("POST", {"_save": "Save"}, ("_save",))
        return Target(key, by_name(key), {}, [], [ADMIN_GET, post])
    row = _first(model_admin.model)
    kwargs = {"object_id": str(row.pk)}
    hostile = [{"object_id": bad} for bad in BAD_OBJECT_IDS]
    if kind == "redirect":  # the bare "<path:object_id>/": on to the change page
        route = f"/admin/{opts.app_label}/{opts.model_name}/"
        redirect = Target(key, lambda kw: route + kw["object_id"] + "/", kwargs, hostile)
        redirect.forms.append(Form("GET", {}, ()))
        return redirect
    if kind == "change":
        change_url = reverse(f"admin:{key}", kwargs=kwargs)
        data, fields = _form_data(client, change_url)
        if not model_admin.has_change_permission(_request_as(client), row):
            data, fields = {"_save": "Save"}, ("_save",)
        forms_ = [ADMIN_GET, Form("POST", data, fields)]
    elif kind == "delete":
        forms_ = [Form("GET", {}, ()), Form("POST", {"post": "yes"}, ("post",), light=True)]
    elif kind == "history":
        forms_ = [Form("GET", {}, (PAGE_VAR,), light=True)]
    elif kind == "send_test":  # the channel page's "Send a test alert"
        forms_ = [Form("GET", {}, ()), Form("POST", {}, ())]
    else:
        raise LookupError(f"{key}: a model admin view the fuzz test doesn't know")
    return Target(key, by_name(key), kwargs, hostile, forms_)


def _request_as(client: ServingClient) -> HttpRequest:
    """A request carrying the client's user, for the admin's permission checks."""
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(pk=client.session[SESSION_KEY])
    return request
