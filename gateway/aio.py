"""Asyncio helpers with no Django in them, for every layer that keeps work on an event loop.

- `LoopLocal`: per-event-loop values. Asyncio clients, locks and tasks belong to the loop that
  made them. A serving process runs one loop, so this holds one value; tests and management
  commands may run several loops one after another, and must not reuse a dead loop's
  connections.
- `spawn`: a background task that belongs to no request.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A background task that belongs to no request: it starts from an empty context, so it
    doesn't inherit (and keep alive) the thread of the request that happened to start it."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


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
