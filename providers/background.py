"""Helpers for the work a serving process does beside its requests."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

T = TypeVar("T")


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A background task that belongs to no request: it starts from an empty context, so it
    doesn't inherit (and keep alive) the thread of the request that happened to start it."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


async def run_db(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ORM code off the event loop, then release the connection as a request would."""

    def call() -> T:
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return await sync_to_async(call)()
