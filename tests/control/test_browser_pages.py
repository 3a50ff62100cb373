"""The static-answer workbench and the thresholds editor, in a real browser against a live
server: an edit reaches the endpoint; a mistake is shown in place and nothing is saved."""

from __future__ import annotations

import pytest

from providers.models import ConfigChange, FailoverPolicy, StaticAnswer
from tests.control.conftest import ask, ask_until, log_in, make_operator, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "What are your opening hours?"


def test_an_edited_static_answer_is_what_the_endpoint_serves(
    page, platform_url, primary, secondary
):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    primary.stop()
    secondary.stop()  # with both providers down, the static tier answers
    page.goto(f"{platform_url}/admin/control/static/")
    with page.expect_response("**/admin/control/static/list/**"):
        page.fill("#static-search-q", "opening hours")
    answer = StaticAnswer.objects.get(question="What are your office hours?")
    row = f"#static-answer-{answer.pk}"
    page.wait_for_selector(row)
    page.click(f"{row} a.button:has-text('Edit')")
    page.wait_for_selector(f"#static-text-{answer.pk}")
    page.fill(f"#static-text-{answer.pk}", "We're open 8:00–20:00, seven days a week.")
    page.fill("#static-try-q", "when do you open")
    page.wait_for_selector("#static-try-result .static-score")
    screenshot(page, "static-answer-editor")
    page.click(f"{row} button:has-text('Save')")
    page.wait_for_selector(f"{row}.static-saved")

    served = ask_until(platform_url, QUESTION, "static")
    deadline_answer = ask_until_text(platform_url, "We're open 8:00–20:00, seven days a week.")
    assert served["tier"] == deadline_answer["tier"] == "static"
    assert (
        ConfigChange.objects.filter(target_type="providers.staticanswer", action="update").count()
        == 1
    )


def ask_until_text(platform_url: str, text: str) -> dict:
    import time

    started = time.monotonic()
    while True:
        answer = ask(platform_url, QUESTION)
        if answer["text"] == text:
            return answer
        assert time.monotonic() - started < 1.0, f"still serving {answer['text']!r}"
        time.sleep(0.05)


def test_the_try_box_shows_the_match_as_you_type(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.goto(f"{platform_url}/admin/control/static/")
    page.type("#static-try-q", "what are your opening hours", delay=20)
    page.wait_for_selector("#static-try-result:has-text('opening hours')")
    assert "100" in page.inner_text("#static-try-result")


def test_an_invalid_threshold_is_shown_in_place_and_nothing_is_saved(page, platform_url):
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.goto(f"{platform_url}/admin/control/thresholds/")
    page.evaluate("window.notReloaded = true")
    page.fill("#threshold-failure_rate_pct input", "150")
    page.fill("#threshold-consecutive_failures input", "5")
    page.click("#thresholds-form input[type=submit]")
    page.wait_for_selector("#threshold-failure_rate_pct .errorlist")
    assert "between 0 and 100" in page.inner_text("#threshold-failure_rate_pct")
    assert page.evaluate("window.notReloaded") is True  # swapped in place
    policy = FailoverPolicy.objects.get()
    assert (policy.failure_rate_pct, policy.consecutive_failures) == (30, 3)
    assert not ConfigChange.objects.filter(target_type="providers.failoverpolicy").exists()
    screenshot(page, "thresholds-invalid")

    page.fill("#threshold-failure_rate_pct input", "40")
    page.click("#thresholds-form input[type=submit]")
    page.wait_for_selector("#threshold-failure_rate_pct:not(.errors)")
    policy.refresh_from_db()
    assert (policy.failure_rate_pct, policy.consecutive_failures) == (40, 5)
    assert ask(platform_url, "Say hello.")["tier"] == "primary"
