"""Per-event-loop values: asyncio clients, locks and tasks belong to the loop that made them.

A serving process runs one loop, so this holds one value; tests and management commands may run
several loops one after another, and must not reuse a dead loop's connections.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )
        # The serving process's one loop, checked first: this runs several times a request.
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], T] | None = None

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0]() is loop:
            return last[1]
        value = self._values.get(loop)
        if value is None:
            value = self._values[loop] = self._factory()
        self._last = (weakref.ref(loop), value)
        return value

    def peek(self) -> T | None:
        """This loop's value if it was ever made, without making it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._values.get(loop)
