"""The live status (spend, breakers, incidents of every provider) takes a permission of its own:
staff without it get a 403 from the panel and its actions, and a front page without it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from providers.models import FailoverPolicy
from tests.control.conftest import status_permission
from tests.factories import make_provider, make_user
from tests.serving import ServingClient

pytestmark = pytest.mark.django_db

PANEL = "/admin/control/status/"


@pytest.fixture(autouse=True)
def _permission() -> None:
    status_permission()


@pytest.fixture
def client(serving_client) -> ServingClient:
    return serving_client


@pytest.fixture
def local():
    return make_provider(name="ollama-local", priority=10)


def test_staff_without_it_get_403_from_the_panel_and_its_actions(client, local):
    client.force_login(make_user(perms=("providers.flip_kill_switch", "providers.change_provider")))
    assert client.get(PANEL).status_code == 403
    flip = client.post("/admin/control/kill-switch/", {"mode": "static_only", "reason": "x"})
    assert flip.status_code == 403
    assert client.post(f"/admin/control/providers/{local.pk}/disable/").status_code == 403
    # Neither action happened.
    assert not FailoverPolicy.objects.exclude(kill_switch="off").exists()
    local.refresh_from_db()
    assert local.enabled is True


def test_staff_without_it_see_a_front_page_without_the_panel(client, local):
    client.force_login(make_user(perms=("providers.view_provider",)))
    page = client.get("/admin/")
    assert page.status_code == 200
    assert b'id="status-panel"' not in page.content
    assert b"ollama-local" not in page.content.split(b"Configuration and records")[0]
    assert b"Can view the live status" in page.content


def test_staff_with_it_see_the_panel(client, local):
    client.force_login(make_user(perms=("providers.view_status",)))
    assert b'id="status-panel"' in client.get("/admin/").content
    panel = client.get(PANEL)
    assert panel.status_code == 200 and b'id="provider-ollama-local"' in panel.content
    # Seeing the status is not changing anything: the actions keep their own permissions.
    assert b"kill-switch-form" not in panel.content
    assert (
        client.post("/admin/control/kill-switch/", {"mode": "off", "reason": "x"}).status_code
        == 403
    )


def test_superusers_have_it(client, local):
    client.force_login(
        get_user_model().objects.create_superuser("root", "root@example.com", "a-long-password-9")
    )
    assert client.get(PANEL).status_code == 200
    assert b'id="status-panel"' in client.get("/admin/").content


# The same permission guards GET /api/v1/status for a caller signed in to the admin. The
# endpoint reads the session on a thread of its own and releases the connection as a request
# does: these tests commit their rows.
STATUS_API = "/api/v1/status"


@pytest.mark.django_db(transaction=True)
def test_staff_without_it_get_403_from_the_status_api(client, local):
    client.force_login(make_user(perms=("providers.view_provider",)))
    response = client.get(STATUS_API)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "status_not_allowed"
    assert "providers" not in response.json()


@pytest.mark.django_db(transaction=True)
def test_staff_with_it_read_the_status_api(client, local):
    client.force_login(make_user(perms=("providers.view_status",)))
    response = client.get(STATUS_API)
    assert response.status_code == 200
    assert [p["name"] for p in response.json()["providers"]] == ["ollama-local"]


@pytest.mark.django_db(transaction=True)
def test_superusers_read_the_status_api(client, local):
    client.force_login(
        get_user_model().objects.create_superuser("root", "root@example.com", "a-long-password-9")
    )
    assert client.get(STATUS_API).status_code == 200
