"""The demo configuration: its providers and the budgets that keep a demo's cloud spend small,
loaded once per database (a `SEED` change marks it loaded, so what an operator deleted stays
deleted)."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from billing.models import Budget, BudgetPeriod, BudgetScope
from providers.models import Provider
from providers.services.seeding import demo_providers_create, demo_rows_recorded, seeded

DEMO_TARGET = "providers.demo_configuration"  # the marker's name since the demo first shipped


@transaction.atomic
def demo_configuration_load() -> bool:
    """Load the demo providers and budgets once per database; False when already loaded."""
    if seeded(DEMO_TARGET):
        return False
    created = demo_providers_create()
    openai_provider = Provider.objects.get(name="openai-cloud")
    budgets = [
        Budget(scope=BudgetScope.ALL, period=BudgetPeriod.DAY, cap=Decimal("5")),
        Budget(scope=BudgetScope.ALL, period=BudgetPeriod.MONTH, cap=Decimal("100")),
        Budget(
            scope=BudgetScope.PROVIDER,
            provider=openai_provider,
            period=BudgetPeriod.DAY,
            cap=Decimal("3"),
        ),
    ]
    created.extend(budget for budget in budgets if _created(budget))
    demo_rows_recorded(DEMO_TARGET, "demo configuration", created)
    return True


def _created(budget: Budget) -> bool:
    """Save a demo budget unless one of its scope, provider, period and unit is there."""
    taken = Budget.objects.filter(
        scope=budget.scope,
        provider=budget.provider,
        client_app=None,
        period=budget.period,
        unit=budget.unit,
    ).exists()
    if not taken:
        budget.full_clean()
        budget.save()
    return not taken
