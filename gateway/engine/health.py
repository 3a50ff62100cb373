"""The health verdict the sentinel's checks add up to, as pure rules (the clock passed in).

- `degraded_after` bad results in the window → DEGRADED: normal-priority traffic stays on the
  provider, high priority moves on;
- DEGRADED for `down_after_s` → DOWN: the provider is skipped;
- back to HEALTHY only once the whole window is clean, so a provider doesn't flap;
- LOADING while the checks find the model loading (the server answers, the model is not yet in
  memory), for at most the policy's `model_load_grace_s`: tried as usual, never an alert.

The stores apply `next_health` atomically (`StateStore.health_record`; the Redis store in Lua).
The router reads the verdict with the breaker, in the same round trip (`BreakerState.health`),
and `health_skip` says what it means for a request. "unknown" (no check yet, or the sentinel
stopped long enough for its verdicts to lapse) counts as healthy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.engine.breaker import BreakerState, Mode, State
from gateway.engine.config import PolicyConfig
from gateway.engine.reasons import SkipReason

# A verdict not refreshed for this many intervals lapses back to unknown: a sentinel that has
# stopped must not keep a provider skipped for ever (the breaker still guards it). The watchdog
# calls the sentinel stopped after 3 missed intervals; this is well past that.
HEALTH_STALE_INTERVALS = 10


class Health(StrEnum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"
    # The server answers and its model is loading (after a restart, or an idle unload): the
    # provider is tried as usual, and its calls' timeouts count against nothing.
    LOADING = "loading"


@dataclass(frozen=True, slots=True)
class HealthState:
    """A provider's verdict: `status` since `since`, from `window` (the last results, newest
    last), the last check's `detail` and when it ran (`checked_at`, 0 for never)."""

    status: Health = Health.UNKNOWN
    since: float = 0.0
    window: tuple[bool, ...] = ()
    detail: str = ""
    checked_at: float = 0.0
    loading_since: float = 0.0  # the first of the loading results in a row (0: not loading)


def next_health(
    current: HealthState,
    ok: bool,
    *,
    now: float,
    window: int,
    degraded_after: int,
    down_after_s: float,
    detail: str = "",
    loading_grace_s: float = 0.0,
) -> HealthState:
    """The verdict once one more result is in. A result that says the model is loading
    (`loading_grace_s` > 0, the policy's grace) is a good one and makes the verdict LOADING,
    for as long as the loading results in a row stay within that grace; past it, a load that
    never ends counts as a bad result. (`redis_scripts.HEALTH_RECORD` is the same rule in
    Lua: change both.)"""
    window = max(1, window)
    loading_since = 0.0
    if loading_grace_s > 0:
        loading_since = current.loading_since or now
        if now - loading_since >= loading_grace_s:
            ok = False
    loading = loading_grace_s > 0 and ok
    results = (*current.window, ok)[-window:]
    clean = len(results) == window and all(results)
    status = current.status
    if loading:
        status = Health.LOADING
    elif status == Health.DEGRADED:
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
    return HealthState(status, since, results, detail, now, loading_since)


def health_skip(health: str, priority: str) -> str:
    """Why a request passes this provider by, from its health ("" to try it)."""
    if health == Health.DOWN:
        return SkipReason.HEALTH_DOWN
    if health == Health.DEGRADED and priority == "high":
        return SkipReason.HEALTH_DEGRADED
    return ""


def health_ttl(policy: PolicyConfig) -> float:
    """How long a provider's verdict holds without a new check."""
    return max(60.0, HEALTH_STALE_INTERVALS * max(policy.sentinel_interval_s, 1))


# A provider's health as the status page and the status endpoint both show it.
HEALTHY, DEGRADED, DOWN, DISABLED = "healthy", "degraded", "down", "disabled"
LOADING = Health.LOADING.value


def provider_health(breaker: BreakerState, *, recent_failures: int, enabled: bool = True) -> str:
    """Healthy, loading, degraded, down or disabled: the worse of what the breaker and its last
    window say and the sentinel's verdict (`breaker.health`, read with it), when the sentinel
    has one. A breaker forced closed takes calls whatever the sentinel says, as the router
    does."""
    if not enabled:
        return DISABLED
    if breaker.mode == Mode.DISABLED or breaker.state == State.OPEN:
        return DOWN
    forced = breaker.mode == Mode.FORCED_CLOSED
    if breaker.health == Health.DOWN and not forced:
        return DOWN
    if (
        breaker.health in (Health.DEGRADED, Health.DOWN)
        or breaker.state == State.HALF_OPEN
        or breaker.consecutive_failures
        or recent_failures
    ):
        return DEGRADED
    return LOADING if breaker.health == Health.LOADING and not forced else HEALTHY
