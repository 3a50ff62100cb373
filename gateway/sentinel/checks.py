"""The health sentinel: active checks of every enabled provider.

The router reacts to failures of real calls; the sentinel looks ahead. Every policy interval it
checks each enabled provider (in parallel, each within the check timeout: reachable, model
present, a one-token inference for self-hosted providers, and for paid ones only when the policy
asks) and adds each result to the provider's window in the shared state, where the rules of
`gateway.engine.health` turn the window into a verdict (healthy, degraded, down).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass
from gateway.adapters.messages import HealthResult
from gateway.engine.config import PolicyConfig, ProviderConfig
from gateway.engine.health import Health, HealthState, health_ttl
from gateway.engine.scrub import KEPT_LIMIT, scrub_cut, scrubbed_traceback

if TYPE_CHECKING:
    from gateway.routing.ports import Runtime

logger = logging.getLogger(__name__)

# The check's own deadline comes first; this only catches a check that ignores it.
CHECK_GRACE_S = 0.5
# Time to spare in the lock between a run and the next tick that may start one: a tick landing
# a little early must not skip a whole interval.
LOCK_SHARE = 0.9
SENTINEL_LOCK = "sentinel"


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
        logger.error(
            "health check of %s failed in an unforeseen way\n%s",
            adapter.name,
            scrubbed_traceback(exc, adapter.config.secrets),
        )
        detail = scrub_cut(
            f"unexpected {type(exc).__name__}: {exc}", KEPT_LIMIT, adapter.config.secrets
        )
        return HealthResult(False, 0.0, detail[:300], ErrorClass.MALFORMED)


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    """What one run found for one provider: the check, the verdict it led to, whether this
    result moved the status, and the verdict before it (read as the run began)."""

    name: str
    result: HealthResult
    state: HealthState
    changed: bool
    previous: HealthState = HealthState()


async def record_result(
    runtime: Runtime, name: str, result: HealthResult, policy: PolicyConfig
) -> tuple[HealthState, bool]:
    """Add a result to a provider's window: the verdict, and whether this result moved it
    (a status is dated from the result that set it, so that is known atomically)."""
    now = runtime.ports.clock.wall()
    state = await runtime.ports.store.health_record(
        name,
        result.ok,
        now=now,
        window=policy.sentinel_window,
        degraded_after=policy.sentinel_degraded_after,
        down_after_s=policy.sentinel_down_after_s,
        detail=result.detail,
        ttl_s=health_ttl(policy),
        loading_grace_s=policy.model_load_grace_s if result.loading else 0.0,
    )
    return state, state.since == now


async def _check_and_record(
    runtime: Runtime, provider: ProviderConfig, policy: PolicyConfig, previous: HealthState
) -> ProviderHealth:
    adapter = runtime.ports.adapters.get(provider)
    if adapter is None:
        result = HealthResult(False, 0.0, f"no adapter for kind {provider.kind}")
    elif provider.api_key_env and not provider.api_key:
        # Without its key a check can only be refused: say so (and why) without calling it.
        problem = provider.api_key_problem or f"{provider.api_key_env} is not set"
        result = HealthResult(False, 0.0, f"no API key: {problem}", ErrorClass.AUTH)
    else:
        result = await check(
            adapter,
            timeout=policy.sentinel_check_timeout_s,
            inference=wants_inference(adapter, policy),
        )
    state, changed = await record_result(runtime, provider.name, result, policy)
    _log_check(provider.name, result, state, changed, policy)
    return ProviderHealth(provider.name, result, state, changed, previous)


def _log_check(
    name: str, result: HealthResult, state: HealthState, changed: bool, policy: PolicyConfig
) -> None:
    """Every failed check is a warning, whatever the status it leaves: a first failure is under
    the degraded threshold (the status reads healthy) and still a failure. A change to a bad
    status, or back to healthy on a good check, is logged as such; a good check that changes
    nothing logs nothing."""
    status = state.status.value
    degraded = state.status in (Health.DEGRADED, Health.DOWN)
    if not result.ok:
        bad, threshold = state.window.count(False), policy.sentinel_degraded_after
        count = (
            f"{bad} of {threshold} bad"
            if bad < threshold
            else f"{bad} bad of the last {len(state.window)}"
        )
        logger.warning(
            "sentinel: %s check failed (%s); status %s, %s",
            name,
            result.detail or "no detail",
            status,
            count,
        )
    if changed and (result.ok or degraded):
        (logger.warning if degraded else logger.info)(
            "sentinel: %s is %s (%s)", name, status, result.detail or "ok"
        )


async def sentinel_run(runtime: Runtime) -> list[ProviderHealth]:
    """Check every enabled provider of the current snapshot at once and record the results;
    returns what was found, in priority order."""
    snapshot = await runtime.snapshots.current()
    # The verdicts before this run, in one round trip: what a move is from, for its alert.
    before = await runtime.ports.store.health_read([p.name for p in snapshot.providers])
    found = await asyncio.gather(
        *(
            _check_and_record(runtime, p, snapshot.policy, before.get(p.name, HealthState()))
            for p in snapshot.providers
        )
    )
    await runtime.ports.store.sentinel_mark_run(runtime.ports.clock.wall())
    return list(found)


async def sentinel_tick(runtime: Runtime) -> list[ProviderHealth] | None:
    """Run the sentinel if no process has in this interval: the schedulers call this more
    often than the interval, from every worker, and one run per interval happens. None when
    it was not this caller's turn."""
    snapshot = await runtime.snapshots.current()
    policy = snapshot.policy
    # Held for most of the interval, and never less than a run can take.
    hold_s = max(LOCK_SHARE * policy.sentinel_interval_s, policy.sentinel_check_timeout_s + 1)
    if not await runtime.ports.store.try_lock(SENTINEL_LOCK, hold_s):
        return None
    return await sentinel_run(runtime)
