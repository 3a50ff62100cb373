"""Calls waiting on each provider in this process: the in-flight limit's count.

A provider that stops answering without refusing (a black hole) holds every call sent to it
until its timeout. Past `ProviderConfig.max_in_flight` calls waiting on it at once, a request
goes to the next provider at once (skipped as `in_flight_limit`) instead of queueing behind
the others. Counted per serving process, with no round trip: the pile-up it prevents is each
process's own.
"""

from __future__ import annotations


class InFlight:
    def __init__(self) -> None:
        self._calls: dict[str, int] = {}

    def take(self, name: str, limit: int) -> bool:
        """A place for one more call to `name`, unless `limit` (0: none) are waiting already."""
        waiting = self._calls.get(name, 0)
        if limit and waiting >= limit:
            return False
        self._calls[name] = waiting + 1
        return True

    def give(self, name: str) -> None:
        left = self._calls.get(name, 0) - 1
        if left > 0:
            self._calls[name] = left
        else:
            self._calls.pop(name, None)

    def count(self, name: str) -> int:
        return self._calls.get(name, 0)
