"""Redis while it answers, this process's memory while it doesn't: routing never stops for a
Redis outage, and the outage and the recovery are logged once each."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import redis

from gateway.engine.breaker import BreakerState, Mode
from gateway.engine.budgets import Hold
from gateway.engine.health import HealthState
from gateway.engine.rate import Limits, RateKeys
from gateway.state.contract import (
    RecordCall,
    Recorded,
    Reserved,
    StateStore,
    StatusRead,
    Windows,
)
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.refusal_log import REFUSALS_KEPT, RefusalNote

logger = logging.getLogger(__name__)

T = TypeVar("T")


# Connection failures, timeouts and a Redis that answers with an error all mean the same here.
REDIS_ERRORS = (redis.RedisError, OSError, asyncio.TimeoutError)


class ResilientStore(StateStore):
    """Redis while it answers; this process's memory while it doesn't, retried every second.

    Routing never fails because of Redis: a breaker decision made on local state is better than
    a 5xx. The outage and the recovery are logged once each, and `/readyz` reports it.
    """

    backend = "redis"
    RETRY_AFTER_S = 1.0

    def __init__(self, primary: RedisStore, fallback: MemoryStore | None = None) -> None:
        self.primary = primary
        self.fallback = fallback or MemoryStore()
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._last_error = ""
        # A change committed while Redis was down: the other processes learn of it once it's back.
        self._bump_pending = False

    def health(self) -> dict[str, Any]:
        if self._down_since is None:
            return {"backend": "redis", "ok": True}
        return {
            "backend": "redis",
            "ok": False,
            "routing_on": "local state",
            "since": self._down_since,
            "error": self._last_error,
        }

    async def _call(self, operation: Callable[[StateStore], Awaitable[T]]) -> T:
        """`operation` on Redis while it answers (retried once a second while it doesn't),
        on this process's memory otherwise."""
        now = time.monotonic()
        if self._down_since is None or now >= self._retry_at:
            self._retry_at = now + self.RETRY_AFTER_S  # one request retries a stalled Redis
            try:
                result = await operation(self.primary)
                if self._bump_pending:
                    await self.primary.bump_config_version_async()
                    self._bump_pending = False
            except REDIS_ERRORS as exc:
                self._went_down(exc, now)
            else:
                if self._down_since is not None:
                    logger.warning("Redis is back: shared state restored")
                    self._down_since = None
                return result
        return await operation(self.fallback)

    def _went_down(self, exc: BaseException, now: float) -> None:
        self._retry_at = now + self.RETRY_AFTER_S
        self._last_error = f"{type(exc).__name__}: {exc}"
        if self._down_since is None:
            self._down_since = time.time()
            logger.error(
                "Redis unreachable (%s): routing on this process's local state until it is back",
                self._last_error,
            )

    async def read(
        self, name: str, spend_keys: Iterable[str] = ()
    ) -> tuple[BreakerState, dict[str, float]]:
        keys = tuple(spend_keys)  # a generator would be spent by a failed first try
        return await self._call(lambda store: store.read(name, keys))

    async def record(self, call: RecordCall) -> Recorded:
        result = await self._call(lambda store: store.record(call))
        if self._down_since is not None and (result.standing_taken or result.slot_taken):
            # Taken in this process's memory, not in Redis: a call that claimed it once Redis
            # is back would run on room nobody else sees held (or counted).
            result = replace(result, standing_taken=False, slot_taken=False)
        return result

    async def transition(self, name: str, expected_version: int, new: BreakerState) -> bool:
        return await self._call(lambda store: store.transition(name, expected_version, new))

    async def acquire_probe(
        self, name: str, version: int, limit: int, now: float | None = None
    ) -> bool:
        return await self._call(lambda store: store.acquire_probe(name, version, limit, now))

    async def release_probe(self, name: str, version: int) -> None:
        await self._call(lambda store: store.release_probe(name, version))

    async def set_mode(self, name: str, mode: Mode) -> BreakerState:
        return await self._call(lambda store: store.set_mode(name, mode))

    async def status_read(
        self,
        names: Sequence[str],
        *,
        windows: Windows,
        now: float,
        spend_keys: Iterable[str] = (),
    ) -> StatusRead:
        listed, keys = tuple(names), tuple(spend_keys)
        return await self._call(
            lambda store: store.status_read(listed, windows=windows, now=now, spend_keys=keys)
        )

    async def seed_spend(self, key: str, amount: float, ttl_s: int) -> None:
        await self._call(lambda store: store.seed_spend(key, amount, ttl_s))

    async def reserve(
        self, holder: str, holds: Sequence[Hold], *, now: float, life_s: float
    ) -> Reserved:
        listed = tuple(holds)
        return await self._call(lambda store: store.reserve(holder, listed, now=now, life_s=life_s))

    async def release(self, holder: str, keys: Iterable[str]) -> None:
        listed = tuple(keys)
        await self._call(lambda store: store.release(holder, listed))

    async def holds_read(self, keys: Iterable[str], *, now: float) -> dict[str, tuple[int, float]]:
        listed = tuple(keys)
        return await self._call(lambda store: store.holds_read(listed, now=now))

    async def rate_take(
        self,
        keys: RateKeys,
        limits: Limits,
        *,
        ttl_s: int,
        check: bool = True,
        amount: int = 1,
    ) -> tuple[bool, dict[str, float]]:
        return await self._call(
            lambda store: store.rate_take(keys, limits, ttl_s=ttl_s, check=check, amount=amount)
        )

    async def cache_get(self, key: str) -> str | None:
        return await self._call(lambda store: store.cache_get(key))

    async def cache_put(self, key: str, value: str, ttl_s: int) -> None:
        await self._call(lambda store: store.cache_put(key, value, ttl_s))

    async def health_record(
        self,
        name: str,
        ok: bool,
        *,
        now: float,
        window: int,
        degraded_after: int,
        down_after_s: float,
        detail: str = "",
        ttl_s: float | None = None,
        loading_grace_s: float = 0.0,
    ) -> HealthState:
        return await self._call(
            lambda store: store.health_record(
                name,
                ok,
                now=now,
                window=window,
                degraded_after=degraded_after,
                down_after_s=down_after_s,
                detail=detail,
                ttl_s=ttl_s,
                loading_grace_s=loading_grace_s,
            )
        )

    async def health_read(self, names: Iterable[str]) -> dict[str, HealthState]:
        listed = tuple(names)
        return await self._call(lambda store: store.health_read(listed))

    async def try_lock(self, key: str, ttl_s: float) -> bool:
        # While Redis is down each process takes its own: a check per process beats none.
        return await self._call(lambda store: store.try_lock(key, ttl_s))

    async def sentinel_mark_run(self, at: float) -> None:
        await self._call(lambda store: store.sentinel_mark_run(at))

    async def sentinel_last_run(self) -> float | None:
        return await self._call(lambda store: store.sentinel_last_run())

    async def refusal_add(self, note: RefusalNote) -> None:
        await self._call(lambda store: store.refusal_add(note))

    async def refusals_read(self, count: int = REFUSALS_KEPT) -> list[RefusalNote]:
        return await self._call(lambda store: store.refusals_read(count))

    async def config_version(self) -> int:
        return await self._call(lambda store: store.config_version())

    async def aclose(self) -> None:
        await self.primary.aclose()

    def bump_config_version(self) -> int:
        try:
            return self.primary.bump_config_version()
        except REDIS_ERRORS as exc:
            if not self._bump_pending:
                logger.error(
                    "Redis unreachable for the config version (%s): the other processes get "
                    "this change once it is back",
                    exc,
                )
            self._bump_pending = True
            return self.fallback.bump_config_version()
