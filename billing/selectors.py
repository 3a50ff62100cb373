"""Reads of money and the ledger."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Q, Sum

from billing.models import Budget, BudgetPeriod, BudgetScope, CallRecord
from providers.models import Provider


def period_start(period: str, now: float) -> datetime:
    moment = datetime.fromtimestamp(now, UTC)
    if period == BudgetPeriod.MONTH:
        return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def budget_spend(*, budget_id: int, now: float) -> Decimal:
    """What the ledger says a budget's scope spent in its current period (the truth the
    state store's counters are rebuilt from)."""
    budget = Budget.objects.select_related("provider").get(pk=budget_id)
    records = CallRecord.objects.filter(created_at__gte=period_start(budget.period, now))
    if budget.scope == BudgetScope.PROVIDER and budget.provider is not None:
        records = records.filter(final_provider=budget.provider.name)
    else:
        # As the live counters: self-hosted providers' spend never counts against these.
        local = Provider.objects.filter(is_local=True).values("name")
        records = records.exclude(final_provider__in=local)
        if budget.scope == BudgetScope.CLIENT:
            records = records.filter(client=budget.client)
    return records.filter(~Q(cost=0)).aggregate(total=Sum("cost"))["total"] or Decimal("0")
