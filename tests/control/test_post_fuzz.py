"""Hostile input into every handler of the admin site and its control room never answers 500.

The handlers come from the URL resolver (tests/control/fuzz_targets.py), each with the fields
it reads and a valid request to start from. Every field gets a fixed table of hostile values:
Unicode digits that `str.isdigit()` takes and `int()` may not, numbers past any range, NaN and
infinities, NUL bytes (PostgreSQL refuses them in text), very long text, several values where
one is expected, and a JSON body where a form is expected. A superuser's every answer is below
500; a staff member without permissions and an anonymous visitor are refused and change
nothing. The table and the sample of single-field cases are fixed, so a run is reproducible.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import DatabaseError, transaction
from django.http import HttpResponse

from gateway.state.memory_store import MemoryStore
from providers.models import AliasEntry, ModelAlias
from providers.services import policy
from runtime.gateway import Gateway
from tests.alerts.builders import make_channel, make_event
from tests.control.conftest import status_permission
from tests.control.fuzz_targets import (
    OPEN_TO_STAFF,
    PASSWORD,
    Target,
    admin_patterns,
    target_for,
)
from tests.factories import (
    make_budget,
    make_call_record,
    make_client_app,
    make_provider,
    make_static_answer,
)
from tests.serving import ServingClient

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# The sharpest first: every field of a form gets each of the first ALL_AT_ONCE at once (a
# one-field form, a few more); a fixed sample of single-field cases draws from them all.
HOSTILE: tuple[Any, ...] = (
    "²",  # isdigit() but not a decimal digit: int() raises
    "٣",  # Arabic-Indic three: int() reads 3
    "9" * 40,
    "",
    "\x00",  # PostgreSQL refuses it in text
    "1e309",
    ["1", "2"],
    "x" * 5000,
    '{"url": "http://127.0.0.1:9/\\u0000", "a": "\\u0000"}',
    "NaN",
    "１",  # fullwidth one
    "-1",
    "0",
    "inf",
    "1.5",
    "on\x00",
    "force_provider",
    "<script>alert(1)</script>",
)
ALL_AT_ONCE = 8
# One hostile value in one field of an otherwise valid request: a fixed sample per form.
SINGLE_FIELD_CASES = 5
# For the fields Django's own code reads on every model's page (`_to_field` and the like).
LIGHT = ("", "²", "\x00")
KEYS = [key for key, _ in admin_patterns()]
# A staff member without any permission, and an anonymous visitor.
VISITORS = ("fuzz-staff", None)


@dataclass(frozen=True)
class Case:
    method: str
    kwargs: dict[str, str]
    data: dict[str, Any]
    as_json: bool = False

    def send(self, client: ServingClient, target: Target) -> HttpResponse:
        url = target.address(self.kwargs)
        if self.as_json:
            body = json.dumps(self.data)
            return client.generic(self.method, url, body, content_type="application/json")
        if self.method == "GET":
            return client.get(url, self.data)
        return client.post(url, self.data)

    def __str__(self) -> str:
        shown = {key: _short(value) for key, value in self.data.items()}
        body = "JSON " if self.as_json else ""
        return f"{self.method} {self.kwargs} {body}{shown}"


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:12]}…({len(value)} chars)"
    return value


def hostile_cases(target: Target) -> Iterator[Case]:
    """Per form: the valid request, hostile values in every field at once, a fixed sample of
    one hostile value in one field, a NUL in each query parameter alone, and a JSON body; then
    the hostile path arguments."""
    for form in target.forms:
        yield Case(form.method, target.kwargs, form.data)
        if not form.fields:
            yield Case(form.method, target.kwargs, form.data | {"unexpected": "²"})
            yield Case(form.method, target.kwargs, {"unexpected": "²"}, as_json=True)
            continue
        values = LIGHT if form.light else HOSTILE
        if len(form.fields) == 1:
            at_once, singles = values[: ALL_AT_ONCE + SINGLE_FIELD_CASES], []
        else:
            pairs = [(name, value) for name in form.fields for value in values]
            at_once = values[:ALL_AT_ONCE]
            seed = f"{target.key} {form.method}"
            count = 0 if form.light else min(SINGLE_FIELD_CASES, len(pairs))
            singles = random.Random(seed).sample(pairs, count)
        for value in at_once:
            yield Case(form.method, target.kwargs, form.data | dict.fromkeys(form.fields, value))
        for name, value in singles:
            yield Case(form.method, target.kwargs, form.data | {name: value})
        if form.method == "GET" and not form.light:
            # A query string's values go straight into queries: a NUL in each one alone, so
            # no other field's refusal hides it.
            for name in form.fields:
                yield Case(form.method, target.kwargs, form.data | {name: "\x00"})
        yield Case(form.method, target.kwargs, dict.fromkeys(form.fields, "²"), as_json=True)
    first = target.forms[0]
    for kwargs in target.hostile_kwargs:
        yield Case(first.method, kwargs, first.data)


def refusal_cases(target: Target, key: str) -> Iterator[Case]:
    for form in target.forms:
        if key not in OPEN_TO_STAFF:  # where the valid request may rightly change something
            yield Case(form.method, target.kwargs, form.data)
        yield Case(form.method, target.kwargs, form.data | dict.fromkeys(form.fields, "²"))
        yield Case(form.method, target.kwargs, form.data, as_json=True)


@pytest.fixture
def gateway() -> Gateway:
    """The serving process's gateway, handed to every request (`logged_in`)."""
    return Gateway(store=MemoryStore())


@pytest.fixture(autouse=True)
def world(settings, gateway) -> None:
    """One of every row the admin shows, so every change and delete page has one to work on."""
    # The log-in's failure counters go to a cache of this test's own, and passwords hash fast.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "post-fuzz",  # not the embedded pass's own memory cache
        }
    }
    status_permission()
    users = get_user_model()
    admin = users.objects.create_superuser("fuzz-admin", "fuzz@example.com", PASSWORD)
    users.objects.create_user("fuzz-staff", "staff@example.com", PASSWORD, is_staff=True)
    local = make_provider(name="ollama-local")
    make_provider(name="openai-cloud", kind="openai", model="gpt-4o-mini", is_local=False)
    make_static_answer()
    make_static_answer()
    make_client_app()
    make_budget()
    alias = ModelAlias.objects.create(name="fast")
    AliasEntry.objects.create(alias=alias, position=1, provider=local)
    make_channel(config={"url": "http://127.0.0.1:9/hook"})
    make_event()
    make_call_record()
    policy.kill_switch_set(mode="off", provider=None, reason="a first record", actor=admin)
    yield
    cache.clear()


def logged_in(gateway: Gateway, username: str | None) -> ServingClient:
    client = ServingClient(gateway, raise_request_exception=False)
    if username is not None:
        client.force_login(get_user_model().objects.get(username=username))
    return client


def build(gateway: Gateway, key: str) -> Target:
    pattern = dict(admin_patterns())[key]
    return target_for(key, pattern, logged_in(gateway, "fuzz-admin"))


def server_error(case: Case, response: HttpResponse) -> str:
    error = response.exc_info[1] if response.exc_info else None
    return f"{case} answered {response.status_code}: {error!r}"


def state() -> dict[str, list[dict[str, Any]]]:
    """Every row of the project's models and the accounts (but when they last logged in)."""
    labels = ("providers", "billing", "alerts", "auth")
    rows = {}
    for model in apps.get_models():
        if model._meta.app_label in labels:
            values = model._default_manager.order_by("pk").values()
            rows[model._meta.label] = [
                {name: value for name, value in row.items() if name != "last_login"}
                for row in values
            ]
    return rows


def test_every_handler_of_the_admin_and_the_control_room_is_fuzzed():
    # A guard for the test below: an enumeration that found nothing would pass it.
    assert {
        "control-kill-switch",
        "control-provider-action",
        "control-thresholds-save",
        "control-static-edit",
        "alerts_alertchannel_send_test",
        "providers_clientapp_changelist",
        "billing_budget_change",
        "login",
    } <= set(KEYS)
    assert len(KEYS) > 60


@pytest.mark.parametrize("key", KEYS)
def test_a_superuser_never_gets_a_server_error_from_hostile_input(key, gateway):
    target = build(gateway, key)
    client = logged_in(gateway, "fuzz-admin")
    errors = []
    for case in hostile_cases(target):
        try:
            with transaction.atomic():
                response = case.send(client, target)
                transaction.set_rollback(True)  # each case starts from the same rows
        except DatabaseError as exc:  # the request broke the transaction: a 500 as well
            errors.append(f"{case} left the transaction broken: {exc!r}")
            continue
        if response.status_code >= 500:
            errors.append(server_error(case, response))
        if key in ("login", "logout", "password_change"):
            client = logged_in(gateway, "fuzz-admin")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("key", KEYS)
def test_without_permission_hostile_input_is_refused_and_changes_nothing(key, gateway):
    target = build(gateway, key)
    before = state()
    errors = []
    for who in VISITORS:
        client = logged_in(gateway, who)
        for case in refusal_cases(target, key):
            response = case.send(client, target)
            if response.status_code >= 500:
                errors.append(f"as {who or 'anonymous'}: {server_error(case, response)}")
            elif not _refused(key, who, response):
                errors.append(f"as {who or 'anonymous'}: {case} answered {response.status_code}")
            if who is not None and key in ("login", "logout"):
                client = logged_in(gateway, who)
    assert not errors, "\n".join(errors)
    assert state() == before


def _refused(key: str, who: str | None, response: HttpResponse) -> bool:
    redirect = response.status_code in (301, 302)
    if who is None:
        # Only the log-in page answers an anonymous visitor; the rest send them to it.
        to_login = redirect and "/admin/login/" in response["Location"]
        return key == "login" or to_login or (key == "logout" and redirect)
    if key in OPEN_TO_STAFF:
        return True  # no permission needed; that it changed nothing is checked below
    # Refused (403), or turned away before the permission check (a method the handler doesn't
    # take, a bad `_to_field`: 4xx), or sent on to the page that refuses (a model's bare
    # object URL).
    return 400 <= response.status_code < 500 or (redirect and key.endswith("_redirect"))
