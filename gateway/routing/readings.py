"""What this process last heard from the shared state, so a steady request needs one round trip.

A routed attempt needs the provider's breaker (with the sentinel's verdict) and its budgets'
spend before the call, and records its outcome after it. The record's reply carries the breaker
as it then is and the spend after the increments (`StateStore.record`), so the next attempt
at the same provider can be admitted on that reply instead of reading again: a plain request
that succeeds on its first provider makes one round trip to Redis for its bookkeeping.

What is kept here is trusted only while it is young (`max_age_s`) and only for a closed breaker
(automatic or forced closed) or an open one: a half-open or forced-open breaker is always read
afresh, so probe slots and overrides keep their exact cross-process semantics. An open breaker
whose cooldown has ended is moved to half-open by its version, which fails on a stale reading
(and reads again), so trusting it costs no probe; it saves a provider that is down a round trip
per request passing it by. The price is bounded: another process's move of a closed or open
breaker (an opening, a close, an operator's override) is seen within `max_age_s`, or at once by
the first call whose reply shows it. With an in-process
store there is no round trip to save, and `max_age_s` is 0.

The budget room (`gateway.routing.standing`) and the rate slots (`gateway.routing.rate_slots`)
this process keeps for its next calls live here too, and are given back with a configuration
change.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.engine.breaker import BreakerState, Mode, State
from gateway.routing.rate_slots import RateSlots
from gateway.routing.standing import StandingHolds


class Readings:
    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._breakers: dict[str, tuple[BreakerState, float]] = {}
        self._spent: dict[str, tuple[float, float]] = {}
        # Budget room kept for this process's next paid calls (`gateway.routing.standing`).
        self.standing = StandingHolds(enabled=max_age_s > 0)
        # Requests counted ahead for its limited callers' next ones (`gateway.routing.rate_slots`).
        self.slots = RateSlots(enabled=max_age_s > 0)

    def lookup(
        self, name: str, spend_keys: Iterable[str], now: float
    ) -> tuple[BreakerState, dict[str, float]] | None:
        """The breaker and spend heard within `max_age_s` of `now`, or None to read afresh."""
        if self.max_age_s <= 0:
            return None
        heard = self._breakers.get(name)
        if heard is None or now - heard[1] > self.max_age_s:
            return None
        state = heard[0]
        if state.state == State.HALF_OPEN or state.mode == Mode.DISABLED:
            return None
        spent: dict[str, float] = {}
        for key in spend_keys:
            value = self._spent.get(key)
            if value is None or now - value[1] > self.max_age_s:
                return None
            spent[key] = value[0]
        return state, spent

    def note(
        self, name: str | None, state: BreakerState | None, spent: dict[str, float], now: float
    ) -> None:
        """What a read or a record's reply said at `now` (monotonic)."""
        if self.max_age_s <= 0:
            return
        if state is not None and name is not None:
            self._breakers[name] = (state, now)
        for key, value in spent.items():
            self._spent[key] = (value, now)
        if len(self._spent) > 4096:  # old periods' keys: drop what has gone stale
            self._spent = {
                key: heard for key, heard in self._spent.items() if now - heard[1] <= self.max_age_s
            }

    def forget(self, name: str) -> None:
        """The breaker moved here (a transition): the next attempt reads it afresh."""
        self._breakers.pop(name, None)

    def clear(self) -> None:
        """A configuration change (an operator's override among them): read everything afresh."""
        self._breakers.clear()
        self._spent.clear()
        self.standing.clear()
        self.slots.clear()
