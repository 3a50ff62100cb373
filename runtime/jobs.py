"""The background jobs, the same functions whichever scheduler runs them (`scheduler.py`).

Periodic jobs are async and take the gateway (its store, adapters and snapshot); one-off jobs
are sync (the ORM, an HTTP call to an alert channel) and take ids.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from alerts.delivery import deliver_event
from alerts.raising import budget_crossed, cloud_share_check, failover_check, sentinel_down
from alerts.verdicts import VerdictMove, verdict_moved
from billing.retention import ledger_housekeeping
from gateway.sentinel.checks import ProviderHealth, sentinel_tick
from gateway.sentinel.keepalive import keepalive_tick
from gateway.sentinel.recovery import probe_idle_breakers
from gateway.state.contract import spend_key
from runtime.background import run_db
from runtime.gateway import Gateway
from runtime.incidents import events_record

logger = logging.getLogger(__name__)

# The sentinel counts as stopped once it has missed this many of its intervals.
SENTINEL_MISSED_INTERVALS = 3
_STARTED_AT = time.time()


def verdict_move(found: ProviderHealth) -> VerdictMove:
    """A sentinel result that moved a verdict, as the alerts take it."""
    return VerdictMove(
        provider=found.name,
        status=found.state.status.value,
        previous=found.previous.status.value,
        previous_since=found.previous.since,
        at=found.state.since,
        window=found.state.window,
        detail=found.state.detail,
    )


async def verdict_alert(found: ProviderHealth) -> None:
    """Raise the alert of a verdict's move, written before the job goes on (a Celery task's
    loop ends with it); a failure to raise it is logged, never the sentinel's."""
    move = verdict_move(found)
    if not (found.changed and move.worth_alerting):
        return
    try:
        await run_db(verdict_moved, move)
    except Exception:
        logger.exception("the verdict alert of %s could not be raised", found.name)


async def sentinel_job(gateway: Gateway) -> object:
    """The checks and the alerts of the verdicts they moved, then the probes of breakers no
    request came to probe (their recovery, recorded before the job ends: a Celery task's loop
    ends with it)."""
    found = await sentinel_tick(gateway)
    if found is not None:
        for health in found:
            await verdict_alert(health)
        await events_record(await probe_idle_breakers(gateway))
    return found


async def recovery_job(gateway: Gateway) -> None:
    """The probes of each open breaker the moment its cooldown ends (this ticks every
    second), not on the sentinel's next run: after an outage, the first provider back serves
    within a second of its cooldown, with or without traffic."""
    await events_record(await probe_idle_breakers(gateway))


async def keepalive_job(gateway: Gateway) -> object:
    return await keepalive_tick(gateway, on_move=verdict_alert)


async def watchdog_job(gateway: Gateway) -> None:
    """Budgets crossing 50 / 85 / 100 %, and today's cloud share above its target."""
    snapshot = await gateway.snapshots.current()
    now = gateway.clock.wall()
    for budget in snapshot.budgets:
        key, _ = spend_key(budget.id, budget.period, now, snapshot.policy.time_zone)
        _, spent = await gateway.store.read("", [key])
        used_pct = 100 * spent.get(key, 0.0) / float(budget.cap) if budget.cap else 0.0
        if used_pct >= budget.warn_pct:
            await run_db(budget_crossed, budget.id, used_pct, key.rsplit(":", 1)[-1])
    await run_db(cloud_share_check)


# Housekeeping runs once in this long across every process (the shared lock).
HOUSEKEEPING_EVERY_S = 600.0


async def housekeeping_job(gateway: Gateway) -> dict[str, int] | None:
    """The ledger's roll-up into the daily reports, then the pruning of records past the
    policy's retention (only days already rolled up): one process at a time, every 10 min."""
    if not await gateway.store.try_lock("housekeeping", HOUSEKEEPING_EVERY_S - 5):
        return None
    now = datetime.fromtimestamp(gateway.clock.wall(), UTC)
    done: dict[str, int] = await run_db(ledger_housekeeping, now=now)
    return done


async def sentinel_watch_job(gateway: Gateway) -> None:
    """Whether the sentinel still runs (on the workers): raised from a serving process, and
    delivered from it, since the workers are what may have stopped."""
    snapshot = await gateway.snapshots.current()
    interval = snapshot.policy.sentinel_interval_s
    allowed = SENTINEL_MISSED_INTERVALS * interval + 30
    last_run = await gateway.store.sentinel_last_run()
    now = gateway.clock.wall()
    if now - _STARTED_AT < allowed:
        return  # just started: the workers may not have had their first tick yet
    if last_run is None or now - last_run > allowed:
        since = "never" if last_run is None else datetime.fromtimestamp(last_run, UTC).isoformat()
        await run_db(sentinel_down, since, allowed)


def deliver_alert_job(event_id: int) -> None:
    deliver_event(event_id)


def failover_check_job(incident_id: int) -> None:
    failover_check(incident_id)


@dataclass(frozen=True, slots=True)
class Periodic:
    name: str
    job: Callable[[Gateway], Awaitable[Any]]
    every_s: float


# The probes at a cooldown's end: every serving process, whichever scheduler (a beat schedule
# of one second would be a task a second on the broker); the breaker's versioned transition and
# probe slots keep several processes to one round.
RECOVERY = Periodic("recovery", recovery_job, 1.0)

# What runs on a schedule. The sentinel and the keepalive take a shared lock for their own
# interval (the policy's), so ticking more often than that costs one Redis command.
PERIODIC = (
    RECOVERY,
    Periodic("sentinel", sentinel_job, 5.0),
    Periodic("keepalive", keepalive_job, 30.0),
    Periodic("watchdog", watchdog_job, 30.0),
    Periodic("housekeeping", housekeeping_job, HOUSEKEEPING_EVERY_S),
)
# With Celery, what a serving process still runs itself: the watch on the sentinel (an alert
# that the workers have stopped can't come from them), and the probes at a cooldown's end (a
# beat schedule of one second would be a task a second on the broker).
SENTINEL_WATCH = Periodic("sentinel_watch", sentinel_watch_job, 30.0)

# One-off jobs, by name: sync, run with positional arguments.
ONE_OFF: dict[str, Callable[..., None]] = {
    "deliver_alert": deliver_alert_job,
    "failover_check": failover_check_job,
}
