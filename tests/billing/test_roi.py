"""The ROI calculator's arithmetic (the design document's formula, to the cent), its inputs read
from real ledger rows and provider prices, and `manage.py roi`'s output and errors."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing.roi import (
    RoiInputError,
    RoiInputs,
    ledger_reading,
    roi_calculate,
)
from providers.models import FailoverPolicy
from providers.selectors import policy_get
from tests.factories import make_call_record, make_provider

CENT = Decimal("0.01")

# The hybrid-cloud design document's example: 5 M tokens a month, 70 % input, €40 of
# infrastructure, 5 % to the cloud, gpt-4o-mini at $0.15 / $0.60 per 1M tokens at 0.93 €/$.
EXAMPLE = RoiInputs(
    monthly_tokens=5_000_000,
    input_share_pct=Decimal(70),
    input_price_per_1m=Decimal("0.15"),
    output_price_per_1m=Decimal("0.60"),
    exchange_rate=Decimal("0.93"),
    infrastructure_per_month=Decimal(40),
    cloud_share_pct=Decimal(5),
    hardware_cost=Decimal(1200),
)
EXAMPLE_OPTIONS = (
    *("--tokens", "5000000", "--input-share", "70", "--infrastructure", "40"),
    *("--cloud-share", "5", "--input-price", "0.15", "--output-price", "0.60"),
    *("--rate", "0.93", "--hardware", "1200"),
)


def example(**changes) -> RoiInputs:
    return replace(EXAMPLE, **changes)


def roi(*args: str) -> str:
    out = StringIO()
    call_command("roi", *args, stdout=out)
    return out.getvalue()


# The arithmetic -------------------------------------------------------------------------------


@pytest.mark.backend_free
def test_the_design_documents_example_gives_1_33_40_07_and_151_million_tokens():
    result = roi_calculate(EXAMPLE, currency="EUR")
    assert result.all_cloud.quantize(CENT) == Decimal("1.33")
    assert result.self_hosted == Decimal(40)
    assert result.hybrid.quantize(CENT) == Decimal("40.07")
    assert round(result.break_even_tokens / 1_000_000) == 151
    # Exactly, before rounding: 3.5 M × 0.1395 + 1.5 M × 0.558 per 1M.
    assert result.all_cloud == Decimal("1.32525")
    assert result.blended_per_1m == Decimal("0.26505")


@pytest.mark.backend_free
def test_the_formula_is_written_out_with_the_numbers_put_in():
    formula = "\n".join(roi_calculate(EXAMPLE, currency="EUR").formula)
    assert "input 0.15 × 0.93 = 0.1395, output 0.6 × 0.93 = 0.558" in formula
    assert "all-cloud = 3,500,000 × 0.1395 / 1M + 1,500,000 × 0.558 / 1M" in formula
    assert "= 0.4883 + 0.8370 = 1.33 EUR" in formula
    assert "hybrid = infrastructure + the cloud share" in formula
    assert "= 40.00 + 5 % × 1.33 = 40.00 + 0.0663 = 40.07 EUR" in formula
    assert "break-even = infrastructure / blended price = 40.00 / 0.26505 per 1M" in formula
    assert "150.9 M tokens a month" in formula


@pytest.mark.backend_free
def test_at_5_million_tokens_the_saving_is_negative_and_it_says_so():
    result = roi_calculate(EXAMPLE, currency="EUR")
    assert result.saving.quantize(CENT) == Decimal("-38.74")
    assert result.payback_months is None
    assert "costs 38.74 EUR a month more than all-cloud" in result.verdict
    assert "never pays back" in result.verdict
    assert "none, the saving is not positive" in result.formula[-1]


@pytest.mark.backend_free
def test_past_break_even_the_hardware_pays_back_in_hardware_over_saving_months():
    result = roi_calculate(example(monthly_tokens=500_000_000), currency="EUR")
    # all-cloud 132.525; hybrid 40 + 5 % of it = 46.62625; saving 85.89875.
    assert result.all_cloud == Decimal("132.525")
    assert result.hybrid == Decimal("46.62625")
    assert result.saving == Decimal("85.89875")
    assert result.payback_months == Decimal(1200) / Decimal("85.89875")
    assert result.payback_months.quantize(CENT) == Decimal("13.97")
    assert result.verdict.startswith("Hybrid saves 85.90 EUR a month")
    assert "pays for itself in 14 months" in result.verdict


@pytest.mark.backend_free
def test_without_hardware_a_positive_saving_pays_back_at_once():
    result = roi_calculate(
        example(monthly_tokens=500_000_000, hardware_cost=Decimal(0)), currency="EUR"
    )
    assert result.payback_months == 0
    assert "nothing to pay back" in result.verdict


@pytest.mark.backend_free
def test_free_cloud_prices_have_no_break_even():
    free = example(input_price_per_1m=Decimal(0), output_price_per_1m=Decimal(0))
    result = roi_calculate(free, currency="EUR")
    assert result.all_cloud == 0 and result.break_even_tokens is None
    assert "none, the cloud price is zero" in "\n".join(result.formula)


@pytest.mark.backend_free
def test_the_exchange_rate_defaults_to_one():
    inputs = RoiInputs(
        monthly_tokens=1_000_000,
        input_share_pct=Decimal(100),
        input_price_per_1m=Decimal(2),
        output_price_per_1m=Decimal(8),
        infrastructure_per_month=Decimal(0),
        cloud_share_pct=Decimal(0),
    )
    result = roi_calculate(inputs, currency="USD")
    assert result.all_cloud == Decimal(2) and result.break_even_tokens == 0
    assert not any(line.startswith("prices in") for line in result.formula)


@pytest.mark.backend_free
def test_inputs_out_of_range_are_refused_each_with_its_reason():
    bad = example(
        monthly_tokens=-1,
        input_share_pct=Decimal("100.5"),
        cloud_share_pct=Decimal(-1),
        output_price_per_1m=Decimal("-0.6"),
        input_price_per_1m=Decimal("1e999999"),
        exchange_rate=Decimal(0),
        hardware_cost=Decimal("NaN"),
    )
    with pytest.raises(RoiInputError) as refused:
        roi_calculate(bad, currency="EUR")
    assert refused.value.problems == {
        "monthly_tokens": "Tokens a month cannot be negative.",
        "input_share_pct": "Input share (%) must be between 0 and 100.",
        "input_price_per_1m": "Input price per 1M tokens is too large: at most "
        "1,000,000,000,000,000.",
        "output_price_per_1m": "Output price per 1M tokens cannot be negative.",
        "exchange_rate": "The exchange rate must be above zero (1 when the prices are already "
        "in the policy's currency).",
        "cloud_share_pct": "Cloud share (%) must be between 0 and 100.",
        "hardware_cost": "One-off hardware cost must be a number.",
    }


# From the ledger --------------------------------------------------------------------------------


@pytest.fixture
def registry():
    """Self-hosted first, then two cloud fallbacks, and a disabled cloud provider ahead of all."""
    return {
        "local": make_provider(name="ollama-local", priority=10, is_local=True),
        "cloud": make_provider(
            name="openai-cloud",
            kind="openai",
            model="gpt-4o-mini",
            priority=20,
            is_local=False,
            price_input_per_1m=Decimal("0.1395"),
            price_output_per_1m=Decimal("0.558"),
        ),
        "later": make_provider(
            name="anthropic-cloud",
            kind="anthropic",
            priority=30,
            is_local=False,
            price_input_per_1m=Decimal("3"),
            price_output_per_1m=Decimal("15"),
        ),
        "off": make_provider(
            name="off-cloud",
            kind="openai",
            priority=5,
            is_local=False,
            enabled=False,
            price_input_per_1m=Decimal("99"),
            price_output_per_1m=Decimal("99"),
        ),
    }


@pytest.fixture
def ledger(registry):
    """Ten days of traffic: 9,000 local tokens and 1,000 cloud tokens, 7,000 of all of them
    input; a cached answer (no provider, no tokens); and a cloud call too old to count."""
    now = timezone.now()
    make_call_record(final_provider="ollama-local", tokens_in=6300, tokens_out=2700)
    make_call_record(
        final_provider="openai-cloud",
        tier="secondary",
        tokens_in=700,
        tokens_out=300,
        created_at=now - timedelta(days=9),
    )
    make_call_record(final_provider="", tier="cache", outcome="fallback", attempts=[])
    make_call_record(
        final_provider="openai-cloud",
        tier="secondary",
        tokens_in=500_000,
        tokens_out=500_000,
        created_at=now - timedelta(days=31),
    )
    return now


@pytest.mark.django_db
def test_the_ledger_gives_the_volumes_scaled_to_a_month_and_the_first_cloud_fallbacks_prices(
    ledger,
):
    reading = ledger_reading(10)
    inputs = reading.inputs
    assert (reading.requests, reading.tokens, reading.cloud_tokens) == (2, 10_000, 1_000)
    assert inputs.monthly_tokens == 30_000  # 10 days' 10,000 tokens, × 3
    assert inputs.input_share_pct == Decimal(70)
    assert inputs.cloud_share_pct == Decimal(10)
    # openai-cloud: the enabled cloud provider with the lowest priority number.
    assert (inputs.input_price_per_1m, inputs.output_price_per_1m) == (
        Decimal("0.1395"),
        Decimal("0.558"),
    )
    assert reading.price_provider == "openai-cloud" and inputs.exchange_rate == 1
    assert (inputs.infrastructure_per_month, inputs.hardware_cost) == (0, 0)
    assert ledger_reading(30).inputs.monthly_tokens == 10_000  # the month is 30 days


@pytest.mark.django_db
def test_a_provider_missing_from_the_registry_counts_as_cloud_as_the_budgets_count_it(registry):
    make_call_record(final_provider="ollama-local", tokens_in=300, tokens_out=0)
    make_call_record(final_provider="gone-provider", tokens_in=100, tokens_out=0)
    assert ledger_reading().inputs.cloud_share_pct == Decimal(25)


@pytest.mark.django_db
def test_the_currency_is_the_policys_and_a_window_past_retention_is_clamped(ledger):
    FailoverPolicy.objects.filter(pk=policy_get().pk).update(
        currency="USD", ledger_retention_days=10
    )
    reading = ledger_reading(90)
    assert reading.currency == "USD" and reading.days == 10
    assert reading.inputs.monthly_tokens == 30_000
    assert "The ledger keeps 10 days" in reading.notes[0]


@pytest.mark.django_db
def test_an_empty_ledger_starts_from_the_documents_input_share_and_the_policys_cloud_target():
    reading = ledger_reading()
    assert reading.inputs.monthly_tokens == 0
    assert reading.inputs.input_share_pct == Decimal(70)
    assert reading.inputs.cloud_share_pct == Decimal(5)
    assert reading.price_provider == ""
    assert "No enabled cloud provider" in reading.notes[-1]


# manage.py roi ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_command_prints_the_figures_and_the_formula_with_the_numbers():
    out = roi(*EXAMPLE_OPTIONS)
    assert "all-cloud              1.33" in out
    assert "hybrid                40.07" in out
    assert "saving               −38.74" in out
    assert "break-even   150.9 M tokens a month" in out
    assert "payback      none" in out
    assert "costs 38.74 EUR a month more than all-cloud" in out
    assert "  all-cloud = 3,500,000 × 0.1395 / 1M + 1,500,000 × 0.558 / 1M" in out


@pytest.mark.django_db
def test_the_command_prints_json_with_every_figure(ledger):
    data = json.loads(roi("--days", "10", "--infrastructure", "40", "--format", "json"))
    assert data["currency"] == "EUR" and data["given"] == ["infrastructure_per_month"]
    assert data["inputs"]["monthly_tokens"] == "30000"
    # 21,000 × 0.1395 + 9,000 × 0.558 per 1M: from the ledger's volumes and openai-cloud's prices.
    assert Decimal(data["all_cloud"]) == Decimal("0.0079515")
    assert Decimal(data["hybrid"]) == Decimal(40) + Decimal("0.00079515")
    assert data["payback_months"] is None
    assert Decimal(data["break_even_tokens"]).quantize(1) == Decimal(150_914_922)
    assert data["formula"][0].startswith("tokens a month = 30,000")
    assert any("openai-cloud" in note for note in data["ledger"])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--cloud-share", "120"), "--cloud-share: Cloud share (%) must be between 0 and 100."),
        (("--input-price", "-1"), "--input-price: Input price per 1M tokens cannot be negative."),
        (("--rate", "0"), "--rate: The exchange rate must be above zero"),
        (("--tokens", "5M"), "'5M' is not a whole number of tokens"),
        (("--hardware", "lots"), "'lots' is not a number"),
        (("--days", "0"), "--days: The ledger window must be at least one day."),
        (("--format", "xml"), "invalid choice: 'xml'"),
    ],
)
def test_the_command_refuses_bad_options_with_a_clear_message(options, message):
    with pytest.raises(CommandError) as refused:
        roi(*options)
    assert message in str(refused.value)
