"""The warm keepalive: a one-token request to the secondary now and then, while it is idle.

A cloud secondary that has had no traffic for a while answers its first request slowly (cold
connections, a cold route on the provider's side), and that first request is the one a failover
sends. So while the primary is healthy and the secondary carries no traffic, the policy can have
it pinged every `keepalive_interval_s`. The ping is a health result for the secondary (it goes
into the sentinel's window), not traffic: the breaker's counters never see it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import HEALTH_PROBE, HealthLevel, HealthResult
from gateway.engine.breaker import Mode, State
from gateway.engine.health import Health, HealthState
from gateway.sentinel.checks import LOCK_SHARE, ProviderHealth, record_result
from gateway.state.contract import Windows

if TYPE_CHECKING:
    from gateway.routing.ports import Runtime

logger = logging.getLogger(__name__)

KEEPALIVE_LOCK = "keepalive"


async def keepalive_tick(
    runtime: Runtime, on_move: Callable[[ProviderHealth], Awaitable[None]] | None = None
) -> str:
    """Ping the secondary if the policy wants it, the primary is healthy, the secondary is idle
    and no process has pinged it in this interval. Returns what it did: "pinged", "pinged:
    failed (<error class>)" or "skipped: <why>". A ping whose result moves the secondary's
    verdict is handed to `on_move`, as the sentinel's moves are (their alerts)."""
    snapshot = await runtime.snapshots.current()
    policy = snapshot.policy
    if not policy.keepalive_enabled:
        return "skipped: disabled"
    if len(snapshot.providers) < 2:
        return "skipped: no secondary"
    primary, secondary = snapshot.providers[0], snapshot.providers[1]
    store, now = runtime.ports.store, runtime.ports.clock.wall()

    state, _ = await store.read(primary.name)
    breaker_closed = state.mode == Mode.FORCED_CLOSED or (
        state.mode == Mode.AUTO and state.state == State.CLOSED
    )
    if state.health not in (Health.HEALTHY, Health.UNKNOWN) or not breaker_closed:
        return "skipped: primary unhealthy"
    windows = Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)
    if (await store.summary(secondary.name, windows, now)).calls:
        return "skipped: secondary carries traffic"
    adapter = runtime.ports.adapters.get(secondary)
    if adapter is None:
        return f"skipped: no adapter for kind {secondary.kind}"
    # The turn is taken last, so a tick that found nothing to do leaves it to the next one.
    hold_s = LOCK_SHARE * policy.keepalive_interval_s
    if not await store.try_lock(KEEPALIVE_LOCK, hold_s):
        return "skipped: pinged recently"

    timeout = min(secondary.timeout_s, policy.sentinel_check_timeout_s)
    started = runtime.ports.clock.mono()
    error: ProviderError | None = None
    try:
        await adapter.complete(HEALTH_PROBE, timeout=timeout)
    except ProviderError as exc:
        error = exc
    result = HealthResult(
        ok=error is None,
        latency_ms=(runtime.ports.clock.mono() - started) * 1000,
        detail=""
        if error is None
        else f"keepalive ping failed: {error.error_class.value} ({error.message})",
        error_class=None if error is None else error.error_class,
        level=HealthLevel.INFERENCE,
    )
    before = (await store.health_read([secondary.name])).get(secondary.name, HealthState())
    health, changed = await record_result(runtime, secondary.name, result, policy)
    if changed and on_move is not None:
        await on_move(ProviderHealth(secondary.name, result, health, changed, before))
    if changed:
        bad = health.status in (Health.DEGRADED, Health.DOWN)
        (logger.warning if bad else logger.info)(
            "keepalive: %s is %s (%s)", secondary.name, health.status.value, result.detail or "ok"
        )
    return "pinged" if error is None else f"pinged: failed ({error.error_class.value})"
