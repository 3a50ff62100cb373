"""Client keys the configuration snapshot doesn't know yet, looked up in the database before
they are refused: a key made a moment ago (in this process or any other) works at once, not
only once the next snapshot has it.

The lookup is by the key's digest (the key itself is never kept nor logged here), off the event
loop, and bounded so that made-up keys can't turn into a query a request:

- a digest the database doesn't know is not looked up again for `MISS_TTL_S` (at most
  `MISSES_MAX` of them are remembered);
- the process looks up at most `LOOKUPS_PER_S` keys a second (with a burst of as many);
  beyond that an unknown key is refused without a lookup;
- requests presenting the same unknown key at the same time share one lookup.

A key found (a usable app, or a revoked or disabled one, whose refusal then says so) is judged
from here until the snapshot changes, and the holder is asked for a new snapshot at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from django.db import Error as DatabaseError

from gateway.aio import LoopLocal, spawn
from gateway.engine.clients import Clients
from gateway.engine.clock import Clock
from gateway.engine.config import Snapshot
from providers.selectors import clients_build
from runtime.background import run_db

logger = logging.getLogger(__name__)

NOT_FOUND = Clients()


class KeyLookup:
    """The bounded database lookup of keys a snapshot doesn't know (`find`)."""

    # A made-up key costs one query per this long; a real one is in the snapshot well before
    # (a poll and a build, about a second), so a key made just after its miss waits no longer.
    MISS_TTL_S = 5.0
    MISSES_MAX = 1024
    # A flood of random keys costs the database this many indexed queries a second, per process.
    LOOKUPS_PER_S = 10.0
    CAPPED_LOG_EVERY_S = 60.0

    def __init__(self, clock: Clock, on_found: Callable[[], None]) -> None:
        self.clock = clock
        # Called when the database knew a key the snapshot didn't: the snapshot is behind.
        self.on_found = on_found
        self.lookups = 0  # queries made, for the operator's and the tests' eyes
        # Digest → when it may be looked up again; insertion order is expiry order.
        self._misses: dict[str, float] = {}
        # What lookups found, for the snapshot they were made against (cleared with it).
        self._found: dict[str, Clients] = {}
        self._found_for: Snapshot | None = None
        self._tokens = 0.0  # full at the first lookup
        self._tokens_at: float | None = None
        self._capped_logged_at: float | None = None
        self._pending: LoopLocal[dict[str, asyncio.Task[Clients]]] = LoopLocal(dict)

    async def find(self, digest: str, snapshot: Snapshot | None) -> Clients:
        """What the database says of the key with this digest, which `snapshot` doesn't know:
        its app (usable, or refused), or nothing, also when the key was missing a moment ago
        or the process is at its lookup rate."""
        if snapshot is not self._found_for:
            self._found.clear()
            self._found_for = snapshot
        found = self._found.get(digest)
        if found is not None:
            return found
        pending = self._pending.get()
        task = pending.get(digest)
        if task is None:
            now = self.clock.mono()
            if self._missed_recently(digest, now) or not self._token_taken(now):
                return NOT_FOUND
            task = pending[digest] = spawn(self._look_up(digest, snapshot))
        # Shielded: a caller that hangs up doesn't cancel the lookup others wait on.
        return await asyncio.shield(task)

    async def _look_up(self, digest: str, snapshot: Snapshot | None) -> Clients:
        self.lookups += 1
        try:
            found = await run_db(clients_build, digest=digest)
        except DatabaseError as exc:
            logger.warning("a client key could not be looked up (%s): refused", type(exc).__name__)
            found = NOT_FOUND
        finally:
            self._pending.get().pop(digest, None)
        if not (found.by_digest or found.refused):
            self._miss(digest, self.clock.mono())
            return found
        if snapshot is self._found_for:
            self._found[digest] = found
        self.on_found()
        return found

    def _missed_recently(self, digest: str, now: float) -> bool:
        misses = self._misses
        while misses:
            oldest = next(iter(misses))
            if misses[oldest] > now:
                break
            del misses[oldest]
        return digest in misses

    def _miss(self, digest: str, now: float) -> None:
        self._misses.pop(digest, None)
        self._misses[digest] = now + self.MISS_TTL_S
        while len(self._misses) > self.MISSES_MAX:
            del self._misses[next(iter(self._misses))]

    def _token_taken(self, now: float) -> bool:
        """One lookup's place in the per-process rate (a token bucket, full at the start)."""
        rate = self.LOOKUPS_PER_S
        if self._tokens_at is None:
            self._tokens = rate
        else:
            self._tokens = min(rate, self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        last = self._capped_logged_at
        if last is None or now - last >= self.CAPPED_LOG_EVERY_S:
            self._capped_logged_at = now
            logger.warning(
                "more than %g unknown client keys a second: refused without a database lookup",
                rate,
            )
        return False
