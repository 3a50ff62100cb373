"""Standing holds: budget room a process keeps ready for its next paid calls, so that far from a
cap a paid call still makes one round trip.

A paid call under a budget holds its worst case before it is made (`StateStore.reserve`): a
round trip of its own. To spare it, each paid call's record (the one round trip every call
makes) also takes, when it fits, a *standing* hold of the same size for this process's next
call to the same provider, under a holder of its own. The next call that fits in one claims it
here, with no round trip, and its record settles the spend, drops the standing hold and takes
the next. The holds are real holds in the store, checked atomically like any other, so a cap is
never passed by them; they are only taken while the counter stays under `SHARE` of its hard
stop (and of its high-priority-only level) with them, so near a cap every call reserves its own
(exact, two round trips), and a pool is at most `POOL_MAX` holds.

A standing hold lapses in the store like any hold; here it is trusted only for the first half of
its life, so a call that claims it late still has a whole call's time before it lapses. Past
that half, or after a configuration change (the caps may have moved), it is given back by the
next paid call, off its path; a process that stops gives its holds back (`release_all`). A
stream, which may outlive a standing hold, reserves its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.engine.budgets import Hold
from gateway.state.contract import HoldRelease, StandingTake, StateStore

# The share of a cap's hard stop up to which standing holds are taken.
SHARE = 0.5
# At most this many standing holds per provider and budgets: room a process holds idle after
# a burst stays small.
POOL_MAX = 8


@dataclass(frozen=True, slots=True)
class Standing:
    holder: str
    amounts: dict[str, float]
    trusted_until: float  # wall time


class StandingHolds:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._pools: dict[tuple[str, tuple[str, ...]], list[Standing]] = {}
        # No longer trusted here (past their trusted half, or a configuration change): to give
        # back (`take_stale`) rather than leave the room held until they lapse.
        self._stale: list[HoldRelease] = []

    def claim(self, name: str, holds: Sequence[Hold], now: float) -> str | None:
        """A standing hold for `name` at least as large as each of `holds`, taken out of the
        pool: its holder, or None when none fits."""
        key = _pool_key(name, holds)
        pool = self._pools.get(key)
        if not pool:
            return None
        self._stale += [
            HoldRelease(standing.holder, key[1])
            for standing in pool
            if standing.trusted_until <= now
        ]
        pool[:] = [standing for standing in pool if standing.trusted_until > now]
        for i, standing in enumerate(pool):
            if all(standing.amounts[h.key] >= h.amount for h in holds):
                del pool[i]
                return standing.holder
        return None

    def offer(self, name: str, holds: Sequence[Hold], life_s: float) -> StandingTake | None:
        """What a record should try to take for `name`'s next call, sized as `holds` (None
        with an in-process store, which has no round trip to spare, or a full pool)."""
        if not self.enabled or len(self._pools.get(_pool_key(name, holds), ())) >= POOL_MAX:
            return None
        # Under half of the high-priority-only level too: room held idle never puts another
        # process's normal call past that level.
        return StandingTake(
            f"standing:{uuid.uuid4().hex}",
            tuple(
                replace(h, limit=min(h.limit, h.level) * SHARE, level=float("inf")) for h in holds
            ),
            life_s,
        )

    def taken(self, name: str, take: StandingTake, now: float) -> None:
        """The store took `take` at `now` (wall time): trust it for half its life."""
        standing = Standing(
            take.holder, {h.key: h.amount for h in take.holds}, now + take.life_s / 2
        )
        self._pools.setdefault(_pool_key(name, take.holds), []).append(standing)

    def take_stale(self) -> list[HoldRelease]:
        stale, self._stale = self._stale, []
        return stale

    def clear(self) -> None:
        """A configuration change: the caps may have moved. The pool is given back."""
        for (_, keys), pool in self._pools.items():
            self._stale += [HoldRelease(standing.holder, keys) for standing in pool]
        self._pools.clear()

    async def release_all(self, store: StateStore) -> None:
        """Give every standing hold back (a stopping process)."""
        self.clear()
        for stale in self.take_stale():
            await store.release(stale.holder, stale.keys)


def _pool_key(name: str, holds: Sequence[Hold]) -> tuple[str, tuple[str, ...]]:
    return name, tuple(h.key for h in holds)
