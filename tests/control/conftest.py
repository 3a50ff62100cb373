"""A live platform (uvicorn in a thread: the admin, its static files and the API) with the two
fake providers, and headless Chromium (Debian's, driven by Playwright) to use it as an operator
would."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from gateway.state.memory_store import MemoryStore
from runtime.gateway import Gateway
from tests.factories import AUTH
from tests.providers.conftest import (  # noqa: F401 - fixtures used through the ones below
    platform_served,
    primary,
    providers_configured,
    secondary,
)
from tests.serving import ServingClient, serving

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR", "test-artifacts")) / "control-room"
PASSWORD = "a-long-test-password-1"


@pytest.fixture(scope="module")
def browser(django_db_setup, django_db_blocker) -> Iterator[object]:
    """Chromium for one test module. Playwright's sync API keeps an event loop running in the
    test's thread, which Django takes for async code: the tests' own ORM calls are allowed
    while it runs (the server, in its own thread, is unaffected by what the test does)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            yield chromium
            chromium.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def platform_url(providers_configured) -> Iterator[str]:  # noqa: F811
    """The whole platform on a loopback port, with its own gateway."""
    with platform_served() as url:
        yield url


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    """The serving process's gateway on an in-process store, the committed changes going to
    it."""
    gateway = Gateway(store=MemoryStore())
    with serving(gateway):
        yield gateway


@pytest.fixture
def serving_client(gateway) -> ServingClient:
    """The admin as the serving process answers it: the gateway in each request's scope."""
    return ServingClient(gateway)


def status_permission() -> Permission:
    """The live status's permission (`FailoverPolicy.Meta.permissions`), made here should the
    test database have been migrated before the model declared it."""
    from providers.models import FailoverPolicy

    permission, _ = Permission.objects.get_or_create(
        content_type=ContentType.objects.get_for_model(FailoverPolicy),
        codename="view_status",
        defaults={"name": "Can view the live status"},
    )
    return permission


def make_operator(username: str, *, permissions: tuple[str, ...] | None = None):
    """A staff user: a superuser, or one holding just `permissions` ("app.codename")."""
    status_permission()
    users = get_user_model()
    if permissions is None:
        return users.objects.create_superuser(username, f"{username}@example.com", PASSWORD)
    user = users.objects.create_user(username, f"{username}@example.com", PASSWORD, is_staff=True)
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def log_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#status-panel")


def ask(base_url: str, prompt: str) -> dict:
    response = httpx.post(
        f"{base_url}/api/v1/complete", json={"prompt": prompt}, headers=AUTH, timeout=15
    )
    assert response.status_code == 200, response.text
    return response.json()


def ask_until(base_url: str, prompt: str, tier: str, *, within_s: float = 1.0) -> dict:
    """Ask until the answer comes from `tier`, failing if that takes longer than `within_s`:
    an operator's change is promised to reach every serving process within a second."""
    started = time.monotonic()
    while True:
        answer = ask(base_url, prompt)
        if answer["tier"] == tier:
            return answer
        waited = time.monotonic() - started
        assert waited < within_s, f"still {answer['tier']} after {waited:.2f} s, not {tier}"
        time.sleep(0.05)


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
