"""Whose answers the answer cache serves: each client app is served its own, so one app's answer
never stands in for another's when every provider fails; apps an operator made share the cache
(`ClientApp.shared_answer_cache`: public FAQ widgets) are served each other's; callers without a
key share a scope of their own. The setting as the admin, `manage.py clientapp` and the
configuration file carry it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.urls import reverse

from gateway.adapters.messages import CompletionRequest
from gateway.engine.clients import ANONYMOUS_CACHE, SHARED_CACHE, ClientConfig
from gateway.routing.answer_cache import answer_key
from providers.models import ClientApp
from providers.selectors import clients_build
from tests.factories import make_client_app
from tests.providers.conftest import ledger_rows, update_client_app, update_policy

QUESTION = "Write me a sonnet about turnips."
PRIMARY_TEXT = "Hello from the local model."
OTHER_KEY = "fgw_another-apps-own-client-key-000000000000000"

live = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other_app(providers_configured) -> ClientApp:
    """A second client app beside the suite's, with a key of its own."""
    return make_client_app(key=OTHER_KEY, name="other")


async def ask_as(api, key: str | None, prompt: str = QUESTION):
    """`POST /api/v1/complete` with `key` in place of the suite's (None: no key at all, an
    anonymous caller)."""
    request = api.build_request("POST", "/api/v1/complete", json={"prompt": prompt})
    del request.headers["Authorization"]
    if key is not None:
        request.headers["Authorization"] = f"Bearer {key}"
    return await api.send(request)


async def ask_suite(api, prompt: str = QUESTION):
    return await api.post("/api/v1/complete", json={"prompt": prompt})


def both_down(primary, secondary) -> None:
    primary.stop()
    secondary.stop()


@live
async def test_an_apps_answer_is_not_served_to_another_app_when_every_provider_fails(
    other_app, api, gateway, primary, secondary
):
    assert (await ask_suite(api)).json()["provider"] == "ollama-local"
    both_down(primary, secondary)

    stranger = (await ask_as(api, OTHER_KEY)).json()
    owner = (await ask_suite(api)).json()

    assert (stranger["tier"], stranger["is_fallback"]) == ("degraded", True)
    assert PRIMARY_TEXT not in json.dumps(stranger)
    assert (owner["tier"], owner["text"]) == ("cache", PRIMARY_TEXT)
    records = await ledger_rows(gateway, at_least=3)
    assert [(r.client, r.cache_hit) for r in records] == [
        ("suite", False),
        ("other", False),
        ("suite", True),
    ]


@live
async def test_two_apps_that_share_the_cache_are_served_each_others_answers(
    other_app, api, gateway, primary, secondary
):
    await update_client_app(gateway, "suite", shared_answer_cache=True)
    await update_client_app(gateway, "other", shared_answer_cache=True)
    assert (await ask_suite(api)).json()["provider"] == "ollama-local"
    both_down(primary, secondary)

    body = (await ask_as(api, OTHER_KEY)).json()

    assert (body["tier"], body["text"], body["is_fallback"]) == ("cache", PRIMARY_TEXT, True)


@live
async def test_an_app_that_shares_is_not_served_the_answers_of_one_that_does_not(
    other_app, api, gateway, primary, secondary
):
    await update_client_app(gateway, "other", shared_answer_cache=True)
    assert (await ask_suite(api)).json()["provider"] == "ollama-local"
    both_down(primary, secondary)

    assert (await ask_as(api, OTHER_KEY)).json()["tier"] == "degraded"


@live
async def test_cost_saver_serves_an_app_only_its_own_answers(
    other_app, api, gateway, primary, secondary
):
    await update_policy(gateway, cache_mode="cost_saver")
    await ask_suite(api)

    stranger = (await ask_as(api, OTHER_KEY)).json()
    owner = (await ask_suite(api)).json()

    assert (stranger["tier"], stranger["provider"]) == ("primary", "ollama-local")
    assert owner["tier"] == "cache"
    assert primary.calls == 2


@live
async def test_callers_without_a_key_share_a_scope_of_their_own(api, gateway, primary, secondary):
    await update_policy(gateway, anonymous_access=True)
    assert (await ask_as(api, None)).json()["provider"] == "ollama-local"
    both_down(primary, secondary)

    app = (await ask_suite(api)).json()
    anonymous = (await ask_as(api, None)).json()

    assert app["tier"] == "degraded"
    assert (anonymous["tier"], anonymous["text"]) == ("cache", PRIMARY_TEXT)


# The scope as the snapshot and the key read it ----------------------------------------------


@pytest.mark.backend_free
def test_each_scope_is_a_different_cache_entry():
    request = CompletionRequest(prompt=QUESTION)
    scopes = [
        ClientConfig(name="shop", key_prefix="k").cache_scope,
        ClientConfig(name="anonymous", key_prefix="k").cache_scope,  # an app of that name
        ClientConfig(name="faq", key_prefix="k", shared_answer_cache=True).cache_scope,
        ANONYMOUS_CACHE,
    ]
    assert scopes[2] == SHARED_CACHE
    assert len({answer_key(request, scope=scope) for scope in scopes}) == 4


@pytest.mark.django_db
def test_the_snapshot_carries_the_apps_choice(other_app):
    ClientApp.objects.filter(name="other").update(shared_answer_cache=True)
    apps = {app.name: app for app in clients_build().by_digest.values()}
    assert apps["other"].cache_scope == SHARED_CACHE
    assert apps["suite"].cache_scope == "app:suite"


# Where an operator sets it -----------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_app_keeps_its_answers_to_itself_unless_told_to_share():
    out = io.StringIO()
    call_command("clientapp", "create", "shop", "--json", stdout=out)
    call_command("clientapp", "create", "faq-widget", "--shared-cache", "--json", stdout=out)
    shared = dict(ClientApp.objects.values_list("name", "shared_answer_cache"))
    assert shared == {"shop": False, "faq-widget": True}
    out = io.StringIO()
    call_command("clientapp", "list", "--json", stdout=out)
    listed = {row["name"]: row["shared_answer_cache"] for row in json.loads(out.getvalue())}
    assert listed == shared


@pytest.mark.django_db
def test_the_admin_form_has_the_setting(client, admin_user, other_app):
    client.force_login(admin_user)
    page = client.get(reverse("admin:providers_clientapp_change", args=[other_app.pk]))
    assert page.status_code == 200
    assert 'name="shared_answer_cache"' in page.content.decode()


@pytest.mark.django_db
def test_the_configuration_file_carries_the_setting(other_app, tmp_path: Path):
    ClientApp.objects.filter(name="other").update(shared_answer_cache=True)
    out = io.StringIO()
    call_command("config", "export", "--format", "json", stdout=out, stderr=io.StringIO())
    doc = json.loads(out.getvalue())
    apps = {app["name"]: app["shared_answer_cache"] for app in doc["client_apps"]}
    assert apps == {"other": True, "suite": False}

    ClientApp.objects.filter(name="other").update(shared_answer_cache=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    call_command("config", "apply", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert ClientApp.objects.get(name="other").shared_answer_cache is True


@live
async def test_a_change_of_the_setting_reaches_the_serving_snapshot(other_app, gateway):
    await update_client_app(gateway, "other", shared_answer_cache=True)
    snapshot = await gateway.snapshots.current()
    [other] = [app for app in snapshot.clients.by_digest.values() if app.name == "other"]
    assert other.cache_scope == SHARED_CACHE
    assert await sync_to_async(ClientApp.objects.filter(shared_answer_cache=True).count)() == 1
