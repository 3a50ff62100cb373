"""The ROI calculator in a real browser against a live server: the form starts from the ledger,
and a calculation swaps its result in place, with the inputs in the address bar."""

from __future__ import annotations

from decimal import Decimal

import pytest

from providers.models import Provider
from tests.control.conftest import log_in, make_operator, screenshot
from tests.factories import make_call_record

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_calculation_shows_the_costs_and_the_formula_without_a_reload(page, platform_url):
    # openai-cloud (priority 20) is the first cloud fallback: gpt-4o-mini's prices in EUR.
    Provider.objects.filter(name="openai-cloud").update(
        price_input_per_1m=Decimal("0.1395"), price_output_per_1m=Decimal("0.558")
    )
    make_call_record(final_provider="ollama-local", tokens_in=66_500, tokens_out=28_500)
    make_call_record(final_provider="openai-cloud", tokens_in=3_500, tokens_out=1_500)
    make_operator("ops")
    log_in(page, platform_url, "ops")
    page.click("nav.control-nav a:has-text('ROI')")
    page.wait_for_selector("#roi-figures")
    assert page.input_value("#id_monthly_tokens") == "100000"
    assert page.input_value("#id_cloud_share_pct") == "5"
    assert page.input_value("#id_input_price_per_1m") == "0.1395"

    page.evaluate("window.notReloaded = true")
    page.fill("#id_monthly_tokens", "5000000")
    page.fill("#id_infrastructure_per_month", "40")
    page.click("#roi-form input[type=submit]")
    page.wait_for_selector("#roi-figure-hybrid:has-text('40.07 EUR')")
    assert "1.33 EUR" in page.inner_text("#roi-figure-all-cloud")
    assert "150.9 M tokens a month" in page.inner_text("#roi-figure-break-even")
    assert "40.00 + 5 % × 1.33" in page.inner_text("#roi-formula")
    assert page.evaluate("window.notReloaded") is True  # swapped in place
    assert "monthly_tokens=5000000" in page.url  # and linkable
    screenshot(page, "roi-calculator")

    page.fill("#id_cloud_share_pct", "150")
    page.click("#roi-form input[type=submit]")
    page.wait_for_selector("#roi-cloud_share_pct .errorlist")
    assert "between 0 and 100" in page.inner_text("#roi-cloud_share_pct")
    assert page.is_visible("#roi-no-result")
