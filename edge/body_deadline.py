"""The deadline a request's body must arrive within, kept by one watch per event loop.

A timer per request (`asyncio.timeout`) starts and stops an event-loop timer for every request,
about 15 µs of the API's request on this project's machine (bench/). Here a request only notes
its deadline in a dict; one task per loop looks every `WATCH_INTERVAL_S` for reads past theirs
and cancels them, and the read answers `BodyTimedOut`. A body is so cut off between its
deadline and `WATCH_INTERVAL_S` after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from gateway.aio import LoopLocal, spawn

T = TypeVar("T")

WATCH_INTERVAL_S = 0.25


class BodyTimedOut(Exception):
    pass


class _Watch:
    def __init__(self) -> None:
        self.reading: dict[asyncio.Task[Any], float] = {}
        self.expired: set[asyncio.Task[Any]] = set()
        self.task = spawn(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = loop.time()
            for task, deadline in list(self.reading.items()):
                if deadline <= now and task not in self.expired:
                    self.expired.add(task)
                    task.cancel()


_watches: LoopLocal[_Watch] = LoopLocal(_Watch)


def _watch() -> _Watch:
    watch = _watches.get()
    if watch.task.done():  # cancelled along with its loop's other tasks, on a loop that goes on
        watch.task = spawn(watch._run())
    return watch


async def within_deadline(reading: Awaitable[T], *, timeout_s: float) -> T:
    """`reading`'s result, or `BodyTimedOut` once `timeout_s` have passed (give or take the
    watch's interval). Only for what the current task awaits itself: the watch cancels it."""
    watch = _watch()
    task = asyncio.current_task()
    assert task is not None  # called from a coroutine the loop runs
    watch.reading[task] = asyncio.get_running_loop().time() + timeout_s
    try:
        return await reading
    except asyncio.CancelledError:
        if task not in watch.expired:
            raise  # cancelled by someone else: not ours to swallow
        task.uncancel()
        raise BodyTimedOut from None
    finally:
        del watch.reading[task]
        watch.expired.discard(task)
