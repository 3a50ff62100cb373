"""The budget gate: spend against caps, decided before a paid call is made."""

from __future__ import annotations

from decimal import Decimal

from providers.engine.config import BudgetConfig


def budget_gate(
    budgets: list[BudgetConfig],
    keys: dict[int, tuple[str, int]],
    spent: dict[str, float],
    estimate: Decimal,
    priority: str,
) -> str:
    """Why a provider's budgets keep this request from it ("" when they don't): a hard stop at
    its level (or when this request's estimate would cross the cap), and past the
    high-priority-only level only `priority: high` gets through."""
    for budget in budgets:
        used = Decimal(str(spent.get(keys[budget.id][0], 0.0)))
        cap = budget.cap
        if used >= cap * budget.hard_stop_pct / 100 or used + estimate > cap:
            return "budget_exhausted"
        if used >= cap * budget.high_priority_only_pct / 100 and priority != "high":
            return "budget_high_priority_only"
    return ""
