"""Budget holds kept in this process's memory: the in-process store's side of reserve, then
settle (`StateStore.reserve`), with the same rule as the Redis script (`budgets.hold_refusal`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from gateway.engine.budgets import Hold, hold_refusal
from gateway.state.contract import Reserved


class Holds:
    def __init__(self) -> None:
        # counter -> holder -> (amount, when it lapses, in wall time)
        self._table: dict[str, dict[str, tuple[float, float]]] = {}
        # The check and the take are one step even when another loop's thread reserves too.
        self._lock = threading.Lock()

    def reserve(
        self,
        holder: str,
        holds: Sequence[Hold],
        spent_of: Callable[[str], float],
        *,
        now: float,
        expires_at: float,
    ) -> Reserved:
        spent: dict[str, float] = {}
        held: dict[str, float] = {}
        refusal = ""
        with self._lock:
            for hold in holds:
                spent[hold.key] = spent_of(hold.key)
                live = self._live(hold.key, now)
                held[hold.key] = sum(amount for amount, _ in live.values())
                refusal = refusal or hold_refusal(spent[hold.key], held[hold.key], hold)
            if refusal:
                return Reserved(refusal, spent, held)
            for hold in holds:
                self._table.setdefault(hold.key, {})[holder] = (hold.amount, expires_at)
                held[hold.key] += hold.amount
        return Reserved("", spent, held)

    def release(self, holder: str, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                table = self._table.get(key)
                if table is not None:
                    table.pop(holder, None)
                    if not table:
                        del self._table[key]

    def read(self, keys: Iterable[str], *, now: float) -> dict[str, tuple[int, float]]:
        read = {}
        with self._lock:
            for key in keys:
                table = self._live(key, now)
                read[key] = (len(table), sum(amount for amount, _ in table.values()))
        return read

    def _live(self, key: str, now: float) -> dict[str, tuple[float, float]]:
        """A counter's holds, the lapsed ones (their process died mid-call) dropped."""
        table = self._table.get(key)
        if table is None:
            return {}
        for lapsed in [holder for holder, (_, until) in table.items() if until <= now]:
            del table[lapsed]
        if not table:
            del self._table[key]
        return table
