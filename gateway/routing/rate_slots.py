"""Rate slots: requests of a caller counted ahead in its window by the record of an earlier one
of this process, so that far from its limit a limited caller's request still makes one round
trip.

A limited caller's request is admitted by an atomic check-and-count in the shared store
(`StateStore.rate_take`): a round trip of its own, before its call's record. To spare it, each
of its calls' records (the one round trip every routed call makes) also counts, when the
window fits it, one more request of the same caller: a *slot*, kept here for this process's next
request of that caller, which then takes it with no round trip. A slot is a request already in
the window, so no process ever admits past a limit with one; slots are only counted while the
window stays within `SHARE` of the limit with them, and only for a limit of at least
`SLOTS_FROM` requests a minute (below it, a slot held idle would be a real share of the limit:
every request is checked on its own), so near a limit every request is checked exactly. A
caller has at most `POOL_MAX` slots in a process.

A slot not taken within `TRUSTED_S` is given back (its count taken off the minute it went into)
by this process's next record, and so is every slot after a configuration change (the limits
may have moved); a stopping process gives its slots back (`give_back_all`). Idle, a slot holds
one request of its caller's window for at most that long. With an in-process store there is no
round trip to spare, and no slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engine.rate import BUCKET_TTL_S, WINDOW_S, Limits, RateKeys
from gateway.state.contract import SlotTake, SpendIncrement, StateStore

# The share of a limit up to which slots are counted ahead.
SHARE = 0.5
# The least requests-a-minute limit slots are counted ahead for.
SLOTS_FROM = 120
# At most this many slots per caller in a process.
POOL_MAX = 8
# How long a slot is taken here after it was counted (wall time, seconds).
TRUSTED_S = 2.0


@dataclass(frozen=True, slots=True)
class Slot:
    keys: RateKeys  # the window it was counted in (its current minute's requests counter)
    minute: int
    trusted_until: float  # wall time


class RateSlots:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._pools: dict[str, list[Slot]] = {}
        # Slots no longer trusted here: given back by the next record (`take_stale`).
        self._stale: list[Slot] = []
        self._next_lapse = float("inf")  # the earliest `trusted_until` of any pool's slots

    def claim(self, subject: str, now: float) -> bool:
        """Take `subject`'s oldest trusted slot for a request at `now` (wall time): whether
        there was one."""
        self._sweep(now)
        pool = self._pools.get(subject)
        if not pool:
            return False
        pool.pop(0)
        return True

    def offer(self, subject: str, keys: RateKeys, limits: Limits) -> SlotTake | None:
        """What a record should count ahead for `subject`, or None: no slots here, a limit too
        small for them, or a full pool."""
        if not self.enabled or len(self._pools.get(subject, ())) >= POOL_MAX:
            return None
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if 0 < rpm < SLOTS_FROM:
            return None
        return SlotTake(keys, Limits(int(rpm * SHARE), int(tpm * SHARE)))

    def taken(self, subject: str, take: SlotTake, now: float) -> None:
        """The store counted `take` at `now` (wall time)."""
        minute = int(now // WINDOW_S)
        slot = Slot(take.keys, minute, now + TRUSTED_S)
        self._pools.setdefault(subject, []).append(slot)
        self._next_lapse = min(self._next_lapse, slot.trusted_until)

    def take_stale(self, now: float) -> tuple[SpendIncrement, ...]:
        """The counts of the slots set aside, as increments that take them back off: only those
        of a minute the window still reads (an older one no longer counts)."""
        return tuple(
            SpendIncrement(keys.requests_now, -float(n), BUCKET_TTL_S)
            for keys, n in self._stale_counts(now)
        )

    def clear(self) -> None:
        """A configuration change: the limits may have moved. Every slot is given back."""
        for pool in self._pools.values():
            self._stale += pool
        self._pools.clear()
        self._next_lapse = float("inf")

    async def give_back_all(self, store: StateStore, now: float) -> None:
        """Give every slot back (a stopping process)."""
        self.clear()
        for keys, n in self._stale_counts(now):
            await store.rate_take(keys, Limits(), ttl_s=BUCKET_TTL_S, check=False, amount=-n)

    def _stale_counts(self, now: float) -> list[tuple[RateKeys, int]]:
        """The slots set aside, taken out and counted by the minute they went into (one the
        window still reads: the current minute or the one before), with that minute's keys."""
        self._sweep(now)
        if not self._stale:
            return []
        current = int(now // WINDOW_S)
        stale, self._stale = self._stale, []
        counts: dict[str, tuple[RateKeys, int]] = {}
        for slot in stale:
            if slot.minute >= current - 1:
                keys, n = counts.get(slot.keys.requests_now, (slot.keys, 0))
                counts[slot.keys.requests_now] = (keys, n + 1)
        return list(counts.values())

    def _sweep(self, now: float) -> None:
        """Every slot past its trust set aside (only once the earliest one may be)."""
        if now < self._next_lapse:
            return
        self._next_lapse = float("inf")
        for subject, pool in list(self._pools.items()):
            kept = [slot for slot in pool if slot.trusted_until > now]
            self._stale += [slot for slot in pool if slot.trusted_until <= now]
            if kept:
                self._pools[subject] = kept
                self._next_lapse = min(self._next_lapse, kept[0].trusted_until)
            else:
                del self._pools[subject]
