"""Reads of money and the ledger."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import F, Q, Sum

from billing.models import Budget, BudgetScope, BudgetUnit, CallRecord
from providers.models import Provider


def cloud_q() -> Q:
    """A record answered (or tried last) by a provider not known as self-hosted: a provider
    deleted since counts as cloud, as in the budgets' spend (`budget_spend`)."""
    local = Provider.objects.filter(is_local=True).values("name")
    return ~Q(final_provider="") & ~Q(final_provider__in=local)


def budget_spend(*, budget_id: int, since: datetime) -> Decimal:
    """What the ledger says a budget's scope spent since `since` (its period's start, which
    the caller knows in the policy's time zone), in money or tokens: the truth the state
    store's counters are rebuilt from."""
    budget = Budget.objects.select_related("provider", "client_app").get(pk=budget_id)
    records = CallRecord.objects.filter(created_at__gte=since)
    if budget.scope == BudgetScope.PROVIDER and budget.provider is not None:
        records = records.filter(final_provider=budget.provider.name)
    else:
        # As the live counters: self-hosted providers' spend never counts against these.
        records = records.filter(cloud_q())
        if budget.scope == BudgetScope.CLIENT:
            if budget.client_app is None:
                return Decimal("0")
            records = records.filter(client=budget.client_app.name)
    if budget.unit == BudgetUnit.TOKENS:
        total = records.aggregate(total=Sum(F("tokens_in") + F("tokens_out")))["total"]
        return Decimal(total or 0)
    return records.filter(~Q(cost=0)).aggregate(total=Sum("cost"))["total"] or Decimal("0")
