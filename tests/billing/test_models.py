from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Budget, CallRecord
from billing.models import Tier as StoredTier
from gateway.routing.walk import Tier
from tests.factories import make_budget, make_call_record, make_client_app, make_provider

pytestmark = pytest.mark.django_db


def _errors(instance) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        instance.full_clean()
    return caught.value.message_dict


class TestBudget:
    def test_its_levels_default_to_warn_high_priority_only_and_stop(self):
        budget = make_budget()
        assert (budget.warn_pct, budget.high_priority_only_pct, budget.hard_stop_pct) == (
            50,
            85,
            100,
        )
        assert budget.unit == "money"  # in the policy's currency
        assert str(budget) == "all traffic: 10.00 per day"

    def test_a_provider_budget_names_its_provider(self):
        assert "provider" in _errors(Budget(scope="provider", period="day", cap=Decimal("1")))
        provider = make_provider(name="openai-cloud")
        budget = make_budget(scope="provider", provider=provider, cap=Decimal("3"))
        assert str(budget) == "provider openai-cloud: 3.00 per day"

    def test_a_client_budget_names_its_client_app(self):
        assert "client_app" in _errors(Budget(scope="client", period="month", cap=Decimal("1")))
        app = make_client_app(name="web-frontend")
        budget = make_budget(scope="client", client_app=app, period="month")
        assert str(budget) == "client web-frontend: 10.00 per month"

    def test_an_all_traffic_budget_names_neither(self):
        app = make_client_app(name="web")
        errors = _errors(Budget(scope="all", client_app=app, period="day", cap=Decimal("1")))
        assert "client_app" in errors

    def test_a_token_budget_counts_tokens(self):
        budget = make_budget(unit="tokens", cap=Decimal("2000000"))
        assert str(budget) == "all traffic: 2,000,000 tokens per day"
        make_budget(unit="money")  # a money budget for the same scope and period beside it

    def test_levels_must_rise(self):
        budget = Budget(
            scope="all", period="day", cap=Decimal("1"), warn_pct=90, high_priority_only_pct=80
        )
        assert "must rise" in _errors(budget)["high_priority_only_pct"][0]

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("cap", Decimal("0")),
            ("cap", Decimal("-5")),
            ("warn_pct", 0),
            ("hard_stop_pct", 101),
            ("unit", "euros"),
        ],
    )
    def test_it_rejects_out_of_range_values(self, field, value):
        budget = Budget(scope="all", period="day", cap=Decimal("1"))
        setattr(budget, field, value)
        assert field in _errors(budget)

    def test_one_budget_per_scope_and_period(self):
        make_budget(scope="all", period="day")
        errors = _errors(Budget(scope="all", period="day", cap=Decimal("2")))
        assert "already a budget" in str(errors)
        make_budget(scope="all", period="month")


class TestCallRecord:
    def test_it_keeps_attempts_as_a_list_and_reads_well(self):
        record = make_call_record(
            final_provider="openai-cloud",
            tier="secondary",
            reason="primary_breaker_open",
            attempts=[
                {"provider": "ollama-local", "outcome": "error", "error_class": "timeout"},
                {"provider": "openai-cloud", "outcome": "ok"},
            ],
        )
        record.refresh_from_db()
        assert [a["provider"] for a in record.attempts] == ["ollama-local", "openai-cloud"]
        assert str(record) == f"{record.request_id} → openai-cloud (200)"

    def test_a_static_answer_reads_as_its_tier(self):
        record = make_call_record(final_provider="", tier="static", outcome="fallback")
        assert "static answer" in str(record)

    def test_request_ids_are_unique(self):
        first = make_call_record()
        assert CallRecord.objects.filter(request_id=first.request_id).count() == 1
        assert make_call_record().request_id != first.request_id


def test_the_ledgers_tiers_are_the_routings():
    # Billing stores what routing answers with, but never imports it: the two lists must agree.
    assert [tier.value for tier in StoredTier] == [tier.value for tier in Tier]
