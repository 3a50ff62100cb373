"""The health sentinel: active checks of every enabled provider, and the verdict they add up to.

The router reacts to failures of real calls; the sentinel looks ahead. Every policy interval it
checks each enabled provider (in parallel, each within the check timeout: reachable, model
present, a one-token inference for self-hosted providers, and for paid ones only when the policy
asks) and keeps the last N results per provider in the shared state:

- `degraded_after` bad results in the window → DEGRADED: normal-priority traffic stays on the
  provider, high priority moves on;
- DEGRADED for `down_after_s` → DOWN: the provider is skipped;
- back to HEALTHY only once the whole window is clean, so a provider doesn't flap.

`next_health` is that rule as pure code (the clock passed in); the stores apply it atomically
(`StateStore.health_record`). The router reads the verdict with the breaker, in the same round
trip (`BreakerState.health`), and `health_skip` says what it means for a request. "unknown" (no
check yet, or the sentinel stopped long enough for its verdicts to lapse) counts as healthy.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from .adapters.base import HealthResult, ProviderAdapter
from .adapters.errors import ErrorClass
from .snapshot import PolicyConfig, ProviderConfig

if TYPE_CHECKING:
    from .gateway import Gateway

logger = logging.getLogger(__name__)

# A verdict not refreshed for this many intervals lapses back to unknown: a sentinel that has
# stopped must not keep a provider skipped for ever (the breaker still guards it). The watchdog
# calls the sentinel stopped after 3 missed intervals; this is well past that.
HEALTH_STALE_INTERVALS = 10
# The check's own deadline comes first; this only catches a check that ignores it.
CHECK_GRACE_S = 0.5
# Time to spare in the lock between a run and the next tick that may start one: a tick landing
# a little early must not skip a whole interval.
LOCK_SHARE = 0.9
SENTINEL_LOCK = "sentinel"


class Health(StrEnum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class HealthState:
    """A provider's verdict: `status` since `since`, from `window` (the last results, newest
    last), the last check's `detail` and when it ran (`checked_at`, 0 for never)."""

    status: Health = Health.UNKNOWN
    since: float = 0.0
    window: tuple[bool, ...] = ()
    detail: str = ""
    checked_at: float = 0.0


def next_health(
    current: HealthState,
    ok: bool,
    *,
    now: float,
    window: int,
    degraded_after: int,
    down_after_s: float,
    detail: str = "",
) -> HealthState:
    """The verdict once one more result is in. (`state_redis._HEALTH_RECORD` is the same rule
    in Lua: change both.)"""
    window = max(1, window)
    results = (*current.window, ok)[-window:]
    clean = len(results) == window and all(results)
    status = current.status
    if status == Health.DEGRADED:
        if clean:
            status = Health.HEALTHY
        elif now - current.since >= down_after_s:
            status = Health.DOWN
    elif status == Health.DOWN:
        if clean:
            status = Health.HEALTHY
    else:  # unknown or healthy
        bad = results.count(False)
        status = Health.DEGRADED if bad >= degraded_after else Health.HEALTHY
    since = now if status != current.status else current.since
    return HealthState(status, since, results, detail, now)


def health_skip(health: str, priority: str) -> str:
    """Why a request passes this provider by, from its health ("" to try it)."""
    if health == Health.DOWN:
        return "health_down"
    if health == Health.DEGRADED and priority == "high":
        return "health_degraded"
    return ""


def health_ttl(policy: PolicyConfig) -> float:
    """How long a provider's verdict holds without a new check."""
    return max(60.0, HEALTH_STALE_INTERVALS * max(policy.sentinel_interval_s, 1))


def wants_inference(adapter: ProviderAdapter, policy: PolicyConfig) -> bool:
    """A one-token inference is checked where it costs nothing, and on paid providers only
    when the policy asks."""
    return not adapter.paid_inference or policy.sentinel_paid_probe


async def check(adapter: ProviderAdapter, *, timeout: float, inference: bool) -> HealthResult:
    """One provider's check, bounded at `timeout`; never raises (a bug is a bad result)."""
    try:
        async with asyncio.timeout(timeout + CHECK_GRACE_S):
            return await adapter.health_check(timeout=timeout, inference=inference)
    except TimeoutError:
        return HealthResult(
            False, timeout * 1000, f"no answer within {timeout:g} s", ErrorClass.TIMEOUT
        )
    except Exception as exc:  # an adapter bug: this provider's bad check, never the sentinel's
        logger.exception("health check of %s failed in an unforeseen way", adapter.name)
        return HealthResult(
            False, 0.0, f"unexpected {type(exc).__name__}: {exc}"[:300], ErrorClass.MALFORMED
        )


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    """What one run found for one provider: the check, the verdict it led to, and whether
    this result moved the status."""

    name: str
    result: HealthResult
    state: HealthState
    changed: bool


async def record_result(
    gateway: Gateway, name: str, result: HealthResult, policy: PolicyConfig
) -> tuple[HealthState, bool]:
    """Add a result to a provider's window: the verdict, and whether this result moved it
    (a status is dated from the result that set it, so that is known atomically)."""
    now = gateway.clock.wall()
    state = await gateway.store.health_record(
        name,
        result.ok,
        now=now,
        window=policy.sentinel_window,
        degraded_after=policy.sentinel_degraded_after,
        down_after_s=policy.sentinel_down_after_s,
        detail=result.detail,
        ttl_s=health_ttl(policy),
    )
    return state, state.since == now


async def _check_and_record(
    gateway: Gateway, provider: ProviderConfig, policy: PolicyConfig
) -> ProviderHealth:
    adapter = gateway.adapters.get(provider)
    if adapter is None:
        result = HealthResult(False, 0.0, f"no adapter for kind {provider.kind}")
    elif provider.api_key_env and not provider.api_key:
        # Without its key a check can only be refused: say so without calling it.
        result = HealthResult(
            False, 0.0, f"its API key variable {provider.api_key_env} is not set", ErrorClass.AUTH
        )
    else:
        result = await check(
            adapter,
            timeout=policy.sentinel_check_timeout_s,
            inference=wants_inference(adapter, policy),
        )
    state, changed = await record_result(gateway, provider.name, result, policy)
    if changed:
        bad = state.status in (Health.DEGRADED, Health.DOWN)
        (logger.warning if bad else logger.info)(
            "sentinel: %s is %s (%s)", provider.name, state.status.value, result.detail or "ok"
        )
    return ProviderHealth(provider.name, result, state, changed)


async def sentinel_run(gateway: Gateway) -> list[ProviderHealth]:
    """Check every enabled provider of the current snapshot at once and record the results;
    returns what was found, in priority order."""
    snapshot = await gateway.snapshots.current()
    found = await asyncio.gather(
        *(_check_and_record(gateway, p, snapshot.policy) for p in snapshot.providers)
    )
    await gateway.store.sentinel_mark_run(gateway.clock.wall())
    return list(found)


async def sentinel_tick(gateway: Gateway) -> list[ProviderHealth] | None:
    """Run the sentinel if no process has in this interval: the schedulers call this more
    often than the interval, from every worker, and one run per interval happens. None when
    it was not this caller's turn."""
    snapshot = await gateway.snapshots.current()
    policy = snapshot.policy
    # Held for most of the interval, and never less than a run can take.
    hold_s = max(LOCK_SHARE * policy.sentinel_interval_s, policy.sentinel_check_timeout_s + 1)
    if not await gateway.store.try_lock(SENTINEL_LOCK, hold_s):
        return None
    return await sentinel_run(gateway)
