"""Client apps in the admin: the key is shown once, on the page that answers the add, and kept
nowhere else (only its digest and prefix); revoking is an audited action of its own."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.test import RequestFactory
from django.urls import reverse

from edge.api.access import Caller, Refusal, identify
from gateway.engine.clients import key_digest
from providers.models import ChangeAction, ClientApp, ConfigChange
from providers.selectors import snapshot_build
from tests.admin_forms import change_form_data
from tests.factories import TEST_CLIENT_KEY, make_client_app, make_user

pytestmark = pytest.mark.django_db

KEY = re.compile(r"fgw_[A-Za-z0-9_-]{43}")
ADD_URL = "admin:providers_clientapp_add"
LIST_URL = "admin:providers_clientapp_changelist"


@pytest.fixture
def operator(client, admin_user):
    client.force_login(admin_user)
    return admin_user


def _add(client, **fields):
    url = reverse(ADD_URL)
    values = {"name": "shop", "allowed_origins": "https://shop.example.com", **fields}
    return client.post(url, change_form_data(client, url, **values))


def _caller(key: str) -> Caller | Refusal:
    """The key as the API checks it, against the configuration as it now stands."""
    request = RequestFactory().post("/api/v1/complete", HTTP_AUTHORIZATION=f"Bearer {key}")
    return identify(request, snapshot_build(version=1, budgets=()))


def _everything_kept(client, response) -> str:
    """All that outlives the response: the rows, the change records, the session, the
    messages and the cookies the browser keeps."""
    kept = [
        str(list(ClientApp.objects.values())),
        str(list(ConfigChange.objects.values())),
        str(dict(client.session.items())),
        str([m.message for m in get_messages(response.wsgi_request)]),
        str({name: morsel.value for name, morsel in client.cookies.items()}),
    ]
    return "\n".join(kept)


class TestAdding:
    def test_the_key_is_shown_once_on_the_page_that_answers_the_add(self, client, operator):
        response = _add(client, requests_per_minute="30")

        assert response.status_code == 200
        assert "no-store" in response["Cache-Control"]
        [key] = set(KEY.findall(response.content.decode()))
        app = ClientApp.objects.get(name="shop")
        assert (app.key_prefix, app.key_digest) == (key[:12], key_digest(key))
        assert app.requests_per_minute == 30
        caller = _caller(key)
        assert isinstance(caller, Caller) and caller.name == "shop"

    def test_the_key_is_kept_nowhere_but_its_digest(self, client, operator):
        response = _add(client)
        [key] = set(KEY.findall(response.content.decode()))

        kept = _everything_kept(client, response)

        assert key not in kept
        assert ClientApp.objects.get().key_digest in str(list(ClientApp.objects.values()))
        created = ConfigChange.objects.get(action=ChangeAction.CREATE)
        assert created.actor == operator and created.after["name"] == "shop"
        assert "key_digest" not in created.after
        # The pages that come after don't have it either.
        listing = client.get(reverse(LIST_URL)).content.decode()
        assert key not in listing and key[:12] in listing

    def test_an_invalid_origin_is_refused_with_the_reason_and_makes_no_key(self, client, operator):
        response = _add(client, allowed_origins="https://shop.example.com/path")

        assert response.status_code == 200
        assert "is not an origin" in response.content.decode()
        assert not KEY.search(response.content.decode())
        assert not ClientApp.objects.exists()
        assert not ConfigChange.objects.exists()


class TestChanging:
    def test_the_change_page_shows_the_prefix_but_never_the_key(self, client, operator):
        response = _add(client)
        [key] = set(KEY.findall(response.content.decode()))
        app = ClientApp.objects.get()
        url = reverse("admin:providers_clientapp_change", args=[app.pk])

        page = client.get(url).content.decode()

        assert key not in page and not KEY.search(page)
        assert f"{app.key_prefix}…" in page

    def test_an_edit_keeps_the_key_and_records_what_moved(self, client, operator):
        app = make_client_app(name="shop", requests_per_minute=60)
        digest = app.key_digest
        url = reverse("admin:providers_clientapp_change", args=[app.pk])

        response = client.post(url, change_form_data(client, url, requests_per_minute="5"))

        assert response.status_code == 302
        app.refresh_from_db()
        assert (app.requests_per_minute, app.key_digest) == (5, digest)
        change = ConfigChange.objects.get()
        assert (change.before, change.after) == (
            {"requests_per_minute": 60},
            {"requests_per_minute": 5},
        )


def _revoke(client, *apps: ClientApp):
    return client.post(
        reverse(LIST_URL),
        {"action": "revoke_keys", "_selected_action": [str(app.pk) for app in apps]},
        follow=True,
    )


class TestRevoking:
    def test_the_revoke_action_revokes_the_key_and_records_it(self, client, operator):
        app = make_client_app(name="shop")
        other = make_client_app(key="fgw_another-apps-key-0000000000000", name="other")

        response = _revoke(client, app)

        assert response.status_code == 200
        assert "Revoked 1 key(s)." in response.content.decode()
        app.refresh_from_db()
        other.refresh_from_db()
        assert app.revoked_at is not None and other.revoked_at is None
        change = ConfigChange.objects.get()
        assert (change.action, change.actor, change.reason) == (
            ChangeAction.UPDATE,
            operator,
            "revoked in the admin",
        )
        assert change.before == {"revoked_at": None} and change.after["revoked_at"]
        caller = _caller(TEST_CLIENT_KEY)
        assert isinstance(caller, Refusal) and caller.error.code == "revoked_api_key"

    def test_revoking_a_revoked_key_again_changes_and_records_nothing(self, client, operator):
        app = make_client_app(name="shop")
        _revoke(client, app)
        app.refresh_from_db()
        revoked_at = app.revoked_at

        response = _revoke(client, app)

        assert "Revoked 0 key(s)." in response.content.decode()
        app.refresh_from_db()
        assert app.revoked_at == revoked_at
        assert ConfigChange.objects.count() == 1

    def test_a_staff_user_without_the_change_permission_cannot_revoke(self, client):
        app = make_client_app(name="shop")
        client.force_login(make_user(perms=("providers.view_clientapp",)))
        assert client.get(reverse(LIST_URL)).status_code == 200

        response = _revoke(client, app)

        assert "Revoked" not in response.content.decode()
        app.refresh_from_db()
        assert app.revoked_at is None
        assert not ConfigChange.objects.exists()
