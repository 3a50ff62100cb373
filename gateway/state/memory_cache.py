"""The in-process answer cache: the memory store's cached answers, bounded in entries and bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable


class AnswerCache:
    """A least-recently-used map of answers with per-entry expiry, bounded by entry count and by
    the values' total size in UTF-8 bytes. An entry is only found expired when it is read (or
    pushed out as least recently used): nothing sweeps in the background.

    One store serves every event loop of the process (the async views' and the threads that
    `async_to_sync` runs loops in), so each operation holds a lock.
    """

    def __init__(self, *, max_entries: int, max_bytes: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._clock = clock
        # key -> (value, expires at on `clock`, size in bytes); the last entry is the newest.
        self._entries: OrderedDict[str, tuple[str, float, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            value, expires_at, _ = entry
            if self._clock() >= expires_at:
                self._remove(key)
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: str, value: str, ttl_s: int) -> None:
        size = len(value.encode())
        with self._lock:
            if key in self._entries:
                self._remove(key)
            # A value that could never fit would only empty the cache on its way through.
            if ttl_s < 1 or size > self.max_bytes:
                return
            self._entries[key] = (value, self._clock() + ttl_s, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, _, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    def _remove(self, key: str) -> None:
        _, _, size = self._entries.pop(key)
        self._bytes -= size
