"""The admin's Content-Security-Policy, in a real browser: the control room's pages, htmx's
refreshes and posts included, run without one violation, and a violation would be seen."""

from __future__ import annotations

import re
import time

import pytest

from alerts.models import AlertEvent
from tests.control.conftest import log_in, make_operator, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPORTER = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.reportViolation(
    `${event.violatedDirective} blocked ${event.blockedURI || "inline"} at ` +
    `${event.sourceFile}:${event.lineNumber} (${event.sample})`
  );
});
"""


@pytest.fixture
def violations(page) -> list[str]:
    """Every violation the browser reports, from its console and from the page's own
    `securitypolicyviolation` events, on every page the test opens."""
    seen: list[str] = []
    page.on(
        "console",
        lambda message: (
            seen.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.expose_function("reportViolation", lambda text: seen.append(text))
    page.add_init_script(REPORTER)
    return seen


def _settle(page) -> None:
    """Let the browser deliver the reports of what it just did (they are queued as tasks)."""
    page.wait_for_timeout(300)


def _open(page, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.ok, url
    policy = response.headers.get("content-security-policy", "")
    assert "default-src 'self'" in policy and "script-src 'self'" in policy, url
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_a_violation_would_be_seen(page, platform_url, violations):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<p style=\"color: red\">x</p>')")
    deadline = time.monotonic() + 5
    while not violations:
        assert time.monotonic() < deadline, "the inline style was not reported"
        page.wait_for_timeout(50)
    assert any("style-src" in text for text in violations)


def test_the_live_status_refreshes_and_posts_within_the_policy(page, platform_url, violations):
    make_operator("ops")
    _open(page, f"{platform_url}/admin/login/?next=/admin/")
    log_in(page, platform_url, "ops")
    _open(page, f"{platform_url}/admin/")

    # htmx's refresh every 2 s swaps in a new panel.
    page.evaluate("document.querySelector('#status-panel').dataset.before = 'refresh'")
    with page.expect_response(re.compile(r"/admin/control/status/$")) as refresh:
        pass
    assert refresh.value.ok
    page.wait_for_selector("#status-panel:not([data-before])")

    # A control that posts through htmx, and the panel it answers with swapped in.
    row = "#provider-ollama-local"
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(re.compile(r"/admin/control/providers/\d+/force_open/$")) as post:
        page.click(f"{row} button:has-text('Force open')")
    assert post.value.ok
    page.wait_for_selector(f"{row}[data-health=down]")
    assert "breaker forced open" in page.inner_text(".control-notice")
    screenshot(page, "status-page-under-csp")

    _settle(page)
    assert violations == []


def test_the_panel_waits_while_the_kill_switch_form_is_being_filled_in(
    page, platform_url, violations
):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    refreshes = []
    page.on(
        "request",
        lambda request: (
            refreshes.append(request.url)
            if request.url.endswith("/admin/control/status/")
            else None
        ),
    )
    page.fill("#kill-switch-reason", "half typed")
    page.wait_for_timeout(2_500)  # past one refresh interval
    assert refreshes == []
    assert page.input_value("#kill-switch-reason") == "half typed"
    page.focus("#provider-ollama-local button:has-text('Reset breaker')")  # leave the form
    with page.expect_request(re.compile(r"/admin/control/status/$"), timeout=5_000):
        pass
    assert violations == []


def test_every_control_room_and_model_page_keeps_to_the_policy(page, platform_url, violations):
    operator = make_operator("ops")
    event = AlertEvent.objects.create(
        kind="failover",
        severity="warning",
        key="failover:ollama-local",
        title="ollama-local failed over",
        data={"provider": "ollama-local"},
    )
    log_in(page, platform_url, "ops")
    for path in (
        "/admin/control/thresholds/",
        "/admin/control/charts/",
        "/admin/control/refusals/",
        "/admin/providers/provider/",
        "/admin/providers/provider/add/",
        "/admin/providers/failoverpolicy/1/change/",
        "/admin/providers/staticanswer/",
        "/admin/providers/configchange/",
        "/admin/billing/callrecord/",
        "/admin/alerts/alertchannel/add/",
        f"/admin/alerts/alertevent/{event.pk}/change/",
        "/admin/auth/user/",
        f"/admin/auth/user/{operator.pk}/change/",
    ):
        _open(page, f"{platform_url}{path}")
        _settle(page)
        assert violations == [], path

    # The workbench's htmx search and try box.
    _open(page, f"{platform_url}/admin/control/static/")
    with page.expect_response("**/admin/control/static/list/**"):
        page.fill("#static-search-q", "opening hours")
    page.type("#static-try-q", "what are your opening hours", delay=10)
    page.wait_for_selector("#static-try-result:has-text('opening hours')")
    _settle(page)
    assert violations == []
