"""The live status page, the kill switch and the provider actions, in a real browser against a
live server: what an operator sees and does at 3 a.m."""

from __future__ import annotations

import re

import httpx
import pytest

from providers.models import ConfigChange, FailoverPolicy
from tests.control.conftest import ask, ask_until, log_in, make_operator, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_logs_in_and_lands_on_the_live_status(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    assert page.locator("#provider-ollama-local").get_attribute("data-health") == "healthy"
    assert page.locator("#serving .serving-tier").get_attribute("data-tier") == "primary"
    assert page.locator("#kill-switch-state").get_attribute("data-state") == "off"
    screenshot(page, "status-page")


def test_flipping_the_kill_switch_serves_static_answers_at_once(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    assert ask(platform_url, "What are your opening hours?")["tier"] == "primary"

    page.once("dialog", lambda dialog: dialog.accept())  # the confirmation
    page.check("input[name=mode][value=static_only]")
    page.fill("#kill-switch-reason", "Primary GPU node being replaced")
    page.click(".kill-switch-form button[type=submit]")
    page.wait_for_selector("#kill-switch-state[data-state=static_only]")

    answer = ask_until(platform_url, "What are your opening hours?", "static")
    assert answer["is_fallback"] is True
    change = ConfigChange.objects.get(action="kill_switch")
    assert change.reason == "Primary GPU node being replaced"
    assert change.actor_name == "ops" and change.after["kill_switch"] == "static_only"
    # The banner is on every admin page while the switch is on.
    page.goto(f"{platform_url}/admin/providers/staticanswer/")
    assert "Primary GPU node being replaced" in page.inner_text("#kill-switch-banner")


def test_the_kill_switch_needs_a_reason(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.once("dialog", lambda dialog: dialog.accept())
    page.check("input[name=mode][value=static_only]")
    page.eval_on_selector("#kill-switch-reason", "el => el.removeAttribute('required')")
    page.click(".kill-switch-form button[type=submit]")
    page.wait_for_selector(".kill-switch-form .field-error")
    assert "Say why" in page.inner_text(".kill-switch-form")
    assert FailoverPolicy.objects.get().kill_switch == "off"
    assert ask(platform_url, "Say hello.")["tier"] == "primary"


def test_a_stopped_primary_turns_down_and_the_tier_moves_without_a_reload(
    page, platform_url, primary
):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.evaluate("window.notReloaded = true")
    primary.stop()
    for _ in range(3):  # three refused calls in a row open its breaker
        assert ask(platform_url, "Say hello.")["tier"] == "secondary"

    page.wait_for_selector("#provider-ollama-local[data-health=down]", timeout=8_000)
    page.wait_for_selector("#serving .serving-tier[data-tier=secondary]", timeout=8_000)
    assert page.evaluate("window.notReloaded") is True
    assert re.search(r"half-open in \d+ s", page.inner_text("#provider-ollama-local"))
    page.wait_for_selector("#incidents td:has-text('ollama-local')", timeout=8_000)
    screenshot(page, "status-page-primary-down")


def test_forcing_a_breaker_open_and_resetting_it(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    row = "#provider-ollama-local"
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"{row} button:has-text('Force open')")
    page.wait_for_selector(f"{row}[data-health=down]")
    assert ask(platform_url, "Say hello.")["tier"] == "secondary"  # shared state: at once

    page.click(f"{row} button:has-text('Reset breaker')")
    page.wait_for_selector(f"{row}[data-health=healthy]")
    assert ask(platform_url, "Say hello.")["tier"] == "primary"
    actions = list(
        ConfigChange.objects.filter(action="breaker")
        .order_by("created_at", "id")
        .values_list("after", flat=True)
    )
    assert [a["mode"] for a in actions] == ["disabled", "auto"]


def test_an_operator_without_the_permission_cannot_flip_the_switch(page, platform_url):
    make_operator(
        "viewer",
        permissions=(
            "providers.view_status",
            "providers.view_provider",
            "providers.view_failoverpolicy",
        ),
    )
    log_in(page, platform_url, "viewer")
    assert page.locator(".kill-switch-form").count() == 0
    assert "takes the permission" in page.inner_text("#status-panel")
    # Going around the page doesn't help either.
    token = page.get_attribute("meta[name=csrf-token]", "content")
    response = page.request.post(
        f"{platform_url}/admin/control/kill-switch/",
        form={"mode": "static_only", "reason": "trying"},
        headers={"X-CSRFToken": token, "Referer": f"{platform_url}/admin/"},
    )
    assert response.status == 403
    assert FailoverPolicy.objects.get().kill_switch == "off"


def test_an_htmx_post_without_the_csrf_token_is_refused(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.evaluate("document.querySelector('meta[name=csrf-token]').remove()")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(re.compile(r"/admin/control/providers/\d+/force_open/")) as info:
        page.click("#provider-ollama-local button:has-text('Force open')")
    assert info.value.status == 403
    assert not ConfigChange.objects.filter(action="breaker").exists()
    assert ask(platform_url, "Say hello.")["tier"] == "primary"


def test_the_status_partial_is_refused_to_anonymous_visitors(platform_url):
    response = httpx.get(f"{platform_url}/admin/control/status/", follow_redirects=False)
    assert response.status_code == 302 and "/admin/login/" in response.headers["location"]
