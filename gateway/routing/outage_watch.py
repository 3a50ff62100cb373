"""Two per-process watches of a provider in trouble, kept with no round trip to the shared
state: whether its model is loading (`LoadingWatch`, asked when a call passes its first-byte
bound, `routing/hedge.py`), and the one call at a time let through while every breaker is open
(`Trickle`, `routing/trickle.py`)."""

from __future__ import annotations

import asyncio
import logging

from gateway.adapters.base import ProviderAdapter

logger = logging.getLogger(__name__)

LOADING_CHECK_S = 2.0  # one look at a provider's loaded models per this long, per process
LOADING_CHECK_TIMEOUT_S = 1.0
# A trickle call starts at most this often per process (and one at a time).
TRICKLE_EVERY_S = 1.0


class LoadingWatch:
    """Per process: whether each provider's model is loading, asked of the provider at most
    once per `LOADING_CHECK_S` (the calls hedged meanwhile share the answer)."""

    def __init__(self) -> None:
        self._asked: dict[str, tuple[float, asyncio.Future[bool]]] = {}

    async def loading(self, adapter: ProviderAdapter, now: float) -> bool:
        name = adapter.name
        asked = self._asked.get(name)
        loop = asyncio.get_running_loop()
        if asked is None or now - asked[0] >= LOADING_CHECK_S or asked[1].get_loop() is not loop:
            future = asyncio.ensure_future(_ask(adapter))
            asked = self._asked[name] = (now, future)
        return await asyncio.shield(asked[1])


async def _ask(adapter: ProviderAdapter) -> bool:
    try:
        return await adapter.model_loading(timeout=LOADING_CHECK_TIMEOUT_S)
    except Exception:  # can't tell: not loading (the call counts as usual)
        logger.warning("could not ask %s whether its model is loading", adapter.name, exc_info=True)
        return False


class Trickle:
    """While every provider's breaker is open: one call at a time in this process, at most one
    started every `TRICKLE_EVERY_S`, so a dead upstream gets a trickle, never a pile."""

    def __init__(self) -> None:
        self._busy = False
        self._last = float("-inf")

    def take(self, now: float) -> bool:
        if self._busy or now - self._last < TRICKLE_EVERY_S:
            return False
        self._busy, self._last = True, now
        return True

    def give(self) -> None:
        self._busy = False
