"""Budgets: which period a moment falls in, and what a paid call must hold against each cap.

A budget's periods are calendar days or months in the policy's time zone. Before a paid call
the router reserves the call's worst case (`holds_for`: the prompt's tokens, estimated from
above, plus the answer's most) against every budget that applies, atomically with the check
(`StateStore.reserve`); the call's record settles what it really used and drops the hold. So
calls admitted at the same moment can't together pass a cap: each sees the others' holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from decimal import Decimal
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.engine.config import BudgetConfig, ProviderConfig
from gateway.engine.reasons import SkipReason

# The answer a request reserves for when it names no max_tokens; the call is then capped at
# it, so the reservation really is the worst case.
RESERVED_ANSWER_TOKENS = 4096
# A stream may run long after its first token: its hold is kept this long, and then as long
# as a whole call's, before any process may take it back.
STREAM_HOLD_S = 900.0
# Sums of holds in floating point: what a cap may be passed by through rounding alone.
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Period:
    label: str  # 2026-12-01 for a day, 2026-12 for a month
    start: float  # wall time, seconds
    end: float


@lru_cache(maxsize=32)
def _zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):  # refused when saved; never fail a request
        return ZoneInfo("UTC")


def _midnight(day: date, zone: tzinfo) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=zone).timestamp()


_last: dict[tuple[str, str], Period] = {}


def budget_period(period: str, now: float, zone: str = "UTC") -> Period:
    """The calendar day or month that `now` falls in, in `zone`."""
    cached = _last.get((period, zone))
    if cached is not None and cached.start <= now < cached.end:
        return cached
    tz = _zone(zone)
    today = datetime.fromtimestamp(now, tz).date()
    if period == "month":
        first = today.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
        current = Period(f"{first:%Y-%m}", _midnight(first, tz), _midnight(following, tz))
    else:
        following = today + timedelta(days=1)
        current = Period(f"{today:%Y-%m-%d}", _midnight(today, tz), _midnight(following, tz))
    _last[(period, zone)] = current
    return current


def prompt_tokens_reserved(text: str, turns: int) -> int:
    """The prompt's tokens from above, whatever the text: the byte-level tokenizers in use
    never make more tokens than UTF-8 bytes (English averages about four bytes a token, digits
    and CJK fewer), plus each turn's framing. Generous for English; exact enough near a cap,
    where it matters, and never short."""
    return len(text.encode()) + 8 * turns + 8


def answer_tokens_reserved(max_tokens: int | None) -> int:
    return max_tokens if max_tokens is not None else RESERVED_ANSWER_TOKENS


@dataclass(frozen=True, slots=True)
class Hold:
    """What one call holds against one budget's counter until its record settles it."""

    key: str  # the budget's counter for this period
    amount: float  # the call's worst case, in the budget's unit
    limit: float  # spent + held + amount must stay within this (the hard stop)
    level: float  # a normal-priority call needs spent + held below this; inf for high priority
    ttl_s: int  # the counter's


def usage(budget: BudgetConfig, cost: Decimal, tokens: int) -> float:
    """A call's use of a budget, in its unit."""
    return float(tokens) if budget.unit == "tokens" else float(cost)


def holds_for(
    budgets: list[BudgetConfig],
    keys: dict[int, tuple[str, int]],
    cost: Decimal,
    tokens: int,
    priority: str,
) -> list[Hold]:
    """The holds a call of worst case `cost` (money) and `tokens` takes: one per budget that
    applies, none for a free call against money budgets."""
    holds = []
    for budget in budgets:
        amount = usage(budget, cost, tokens)
        if amount <= 0:
            continue
        cap = float(budget.cap)
        key, ttl = keys[budget.id]
        level = math.inf if priority == "high" else cap * budget.high_priority_only_pct / 100
        holds.append(Hold(key, amount, cap * budget.hard_stop_pct / 100, level, ttl))
    return holds


def hold_refusal(spent: float, held: float, hold: Hold) -> str:
    """Why `hold` can't be taken on a counter at `spent` with `held` already held ("" if it
    can): the one rule `StateStore.reserve` applies atomically (the Redis script too)."""
    used = spent + held
    if used + hold.amount > hold.limit + EPSILON:
        return SkipReason.BUDGET_EXHAUSTED
    if used >= hold.level - EPSILON:
        return SkipReason.BUDGET_HIGH_PRIORITY_ONLY
    return ""


def budget_gate(spent: dict[str, float], holds: list[Hold]) -> str:
    """Why a provider's budgets keep this request from it, on the spend last heard and before
    any round trip ("" when they may not): the reservation decides exactly, counting every
    other call's hold too; this only spares it when the answer is plain already."""
    for hold in holds:
        refusal = hold_refusal(spent.get(hold.key, 0.0), 0.0, hold)
        if refusal:
            return refusal
    return ""


def hold_seconds(
    provider: ProviderConfig, time_left_s: float, *, stream: bool, grace_s: float
) -> float:
    """How long a call's hold is kept if its process never settles it (it died mid-call): the
    call's longest, then `grace_s` (the request deadline) for its record to arrive."""
    longest = STREAM_HOLD_S if stream else min(provider.timeout_s, time_left_s)
    return longest + grace_s
