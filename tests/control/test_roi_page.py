"""The ROI calculator page through the test client: prefilled from the ledger, the figures and
the formula for what was typed, errors beside the fields, and its permission."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest

from tests.factories import make_call_record, make_provider, make_user

pytestmark = pytest.mark.django_db

PAGE = "/admin/control/roi/"
READERS = ("billing.view_callrecord", "providers.view_provider")
EXAMPLE = {
    "monthly_tokens": "5000000",
    "input_share_pct": "70",
    "input_price_per_1m": "0.15",
    "output_price_per_1m": "0.60",
    "exchange_rate": "0.93",
    "infrastructure_per_month": "40",
    "cloud_share_pct": "5",
    "hardware_cost": "1200",
}


@pytest.fixture
def operator(client):
    client.force_login(make_user(perms=READERS))
    return client


@pytest.fixture
def ledger():
    make_provider(name="ollama-local", priority=10, is_local=True)
    make_provider(
        name="openai-cloud",
        kind="openai",
        model="gpt-4o-mini",
        priority=20,
        is_local=False,
        price_input_per_1m=Decimal("0.1395"),
        price_output_per_1m=Decimal("0.558"),
    )
    make_call_record(final_provider="ollama-local", tokens_in=6300, tokens_out=2700)
    make_call_record(final_provider="openai-cloud", tier="secondary", tokens_in=700, tokens_out=300)


def field_value(page: str, name: str) -> str:
    match = re.search(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"', page)
    assert match, f"no {name} field"
    return match.group(1)


def row(page: str, element_id: str) -> str:
    """The markup from the element with this id to the next of the page's own ids."""
    start = page.find(f'id="{element_id}"')
    assert start >= 0, f"no #{element_id}"
    end = page.find('id="roi-', start + len(element_id) + 5)
    return page[start : end if end >= 0 else len(page)]


def test_the_form_starts_from_the_ledger_and_the_first_cloud_fallbacks_prices(operator, ledger):
    response = operator.get(PAGE)
    assert response.status_code == 200
    page = response.content.decode()
    assert field_value(page, "monthly_tokens") == "10000"  # 30 days of a 30-day month
    assert field_value(page, "input_share_pct") == "70"
    assert field_value(page, "cloud_share_pct") == "10"
    assert field_value(page, "input_price_per_1m") == "0.1395"
    assert field_value(page, "output_price_per_1m") == "0.558"
    assert field_value(page, "infrastructure_per_month") == "0"
    assert "Prices of openai-cloud (gpt-4o-mini)" in page
    assert "2 requests answered by providers, 10,000 tokens" in page


def test_the_design_documents_example_shows_its_figures_and_formula(operator):
    page = operator.get(PAGE, EXAMPLE).content.decode()
    assert "1.33 EUR" in row(page, "roi-figure-all-cloud")
    assert "40.00 EUR" in row(page, "roi-figure-self-hosted")
    assert "40.07 EUR" in row(page, "roi-figure-hybrid")
    saving = row(page, "roi-figure-saving")
    assert "−38.74 EUR" in saving and "negative: hybrid costs more" in saving
    assert "150.9 M tokens a month" in row(page, "roi-figure-break-even")
    assert "none: the saving is not positive" in row(page, "roi-figure-payback")
    formula = row(page, "roi-formula")
    assert "all-cloud = 3,500,000 × 0.1395 / 1M + 1,500,000 × 0.558 / 1M" in formula
    assert "40.00 + 5 % × 1.33 = 40.00 + 0.0663 = 40.07 EUR" in formula
    assert "costs 38.74 EUR a month more than all-cloud" in row(page, "roi-verdict")
    # What was typed stays in the form.
    assert field_value(page, "exchange_rate") == "0.93"


def test_the_costs_are_drawn_as_three_bars_in_well_formed_svg(operator):
    page = operator.get(PAGE, {**EXAMPLE, "monthly_tokens": "500000000"}).content.decode()
    svg = ET.fromstring(re.search(r"<svg[^>]*class=\"chart chart-bars\".*?</svg>", page, re.S)[0])
    ns = "{http://www.w3.org/2000/svg}"
    bars = [rect.find(f"{ns}title").text for rect in svg.iter(f"{ns}rect")]
    assert bars == ["All-cloud: 132.525", "All self-hosted: 40", "Hybrid: 46.6262"]


def test_a_query_string_overrides_only_what_it_names(operator, ledger):
    page = operator.get(PAGE, {"infrastructure_per_month": "40"}).content.decode()
    assert field_value(page, "monthly_tokens") == "10000"
    assert "40.00 EUR" in row(page, "roi-figure-self-hosted")


def test_bad_input_is_shown_beside_its_field_with_no_figures(operator):
    bad = {
        **EXAMPLE,
        "cloud_share_pct": "150",
        "monthly_tokens": "lots",
        "exchange_rate": "0",
        "hardware_cost": "1e999999",
    }
    response = operator.get(PAGE, bad)
    assert response.status_code == 200
    page = response.content.decode()
    assert "between 0 and 100" in row(page, "roi-cloud_share_pct")
    assert "Enter a whole number." in row(page, "roi-monthly_tokens")
    assert "errorlist" in row(page, "roi-cloud_share_pct")
    assert "The exchange rate must be above zero" in row(page, "roi-exchange_rate")
    assert "errorlist" not in row(page, "roi-input_share_pct")
    assert "is too large" in row(page, "roi-hardware_cost")
    assert 'id="roi-no-result"' in page and 'id="roi-figures"' not in page
    assert "Please correct the errors below." in page


def test_extreme_but_allowed_figures_are_shown_not_a_500(operator):
    # Break-even of 10^15 at a blended 10^-12 a million tokens, and payback over a tiny saving.
    extreme = {**EXAMPLE, "infrastructure_per_month": "1e15", "input_price_per_1m": "1e-12",
               "output_price_per_1m": "1e-12", "exchange_rate": "1"}  # fmt: skip
    assert operator.get(PAGE, extreme).status_code == 200
    tiny = {**EXAMPLE, "exchange_rate": "1e-999990"}
    response = operator.get(PAGE, tiny)
    assert response.status_code == 200
    assert "is too small" in row(response.content.decode(), "roi-exchange_rate")


@pytest.mark.parametrize("days", ["-3", "0", "²", "9" * 5000, "3651"])
def test_a_bad_ledger_window_falls_back_to_30_days_and_says_so(operator, days):
    response = operator.get(PAGE, {"days": days})
    assert response.status_code == 200
    page = response.content.decode()
    assert "must be a whole number of days" in row(page, "roi-days-error")
    assert field_value(page, "days") == "30"


def test_htmx_gets_only_the_form_and_its_result(operator):
    response = operator.get(PAGE, EXAMPLE, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<div id="roi"') and "<html" not in page
    assert "40.07 EUR" in page


def test_it_is_linked_from_the_control_rooms_bar(operator):
    page = operator.get(PAGE).content.decode()
    assert re.search(rf'<nav class="control-nav".*href="{PAGE}">ROI</a>.*</nav>', page, re.S)


def test_staff_without_either_view_permission_are_refused(client, ledger):
    client.force_login(make_user(perms=("providers.view_failoverpolicy",)))
    assert client.get(PAGE, EXAMPLE).status_code == 403


def test_the_ledger_alone_fills_the_volumes_but_not_the_prices(client, ledger):
    client.force_login(make_user(perms=("billing.view_callrecord",)))
    page = client.get(PAGE).content.decode()
    assert field_value(page, "monthly_tokens") == "10000"
    assert field_value(page, "input_price_per_1m") == "0"
    assert "Prices not read: the provider registry takes its view permission." in page


def test_the_registry_alone_fills_the_prices_but_not_the_volumes(client, ledger):
    client.force_login(make_user(perms=("providers.view_provider",)))
    page = client.get(PAGE).content.decode()
    assert field_value(page, "monthly_tokens") == "0"
    assert field_value(page, "input_price_per_1m") == "0.1395"
    assert "Volumes not read: the call ledger takes its view permission." in page


def test_someone_not_logged_in_is_sent_to_the_login(client):
    response = client.get(PAGE)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
