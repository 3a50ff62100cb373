"""The refused requests in a real browser against a live server: an operator on the page sees an
agent's refused request arrive without a reload, with its field and the door's message."""

from __future__ import annotations

import httpx
import pytest

from runtime import refusals
from tests.control.conftest import log_in, make_operator, screenshot
from tests.factories import AUTH

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_agents_refused_request_appears_on_the_page_without_a_reload(page, platform_url):
    refusals.KEEP_RATE.clear()  # the sample's room is the process's
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.click("nav.control-nav a:has-text('Refusals')")
    page.wait_for_selector("#no-refusals")
    page.evaluate("window.notReloaded = true")
    body = {"model": "auto", "messages": [{"role": "robot", "content": "Beep."}]}
    response = httpx.post(f"{platform_url}/v1/chat/completions", json=body, headers=AUTH)
    assert response.status_code == 400
    row = page.wait_for_selector("#refusals-list tr.refusal", timeout=15_000)
    text = row.inner_text()
    assert "/v1/chat/completions" in text and "invalid_field" in text
    assert response.json()["error"]["param"] in text and "'role' must be" in text
    assert page.evaluate("window.notReloaded") is True
    screenshot(page, "refusals-page")
