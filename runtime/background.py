"""Running the ORM from a serving process's event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

T = TypeVar("T")


async def run_db(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ORM code off the event loop, then release the connection as a request would."""

    def call() -> T:
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return await sync_to_async(call)()
