"""What happens after a request is routed: its line in the call ledger, its breaker events as
incidents, and the troubles an operator must hear about handed to the alerts. All of it is
buffered or handed over: nothing here makes the request wait."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

from django.utils import timezone

from alerts.estimate import Outage
from alerts.raising import credentials_rejected, request_throttle, static_tier_active
from gateway.adapters.errors import ERROR_TABLE
from gateway.aio import spawn
from gateway.engine.breaker import Mode, State
from gateway.engine.tracing import REQUEST
from gateway.routing.cascade import RouteRequest, RouteResult
from gateway.routing.walk import Tier
from runtime.background import run_db
from runtime.gateway import Gateway
from runtime.incidents import note_events
from runtime.metrics import note_call
from runtime.tracing import RequestSpan

logger = logging.getLogger(__name__)

# The alert each failure raises, as the error table says (by the class an attempt records).
_ALERTS = {kind.value: rule.alert for kind, rule in ERROR_TABLE.items() if rule.alert}


def note_trouble(result: RouteResult, gateway: Gateway) -> None:
    """Hand what an operator must hear about to the alerts, off the request's path and at most
    once per key every few seconds from this process."""
    if result.tier == Tier.PRIMARY and len(result.attempts) == 1:
        return  # the steady state: nothing to look at
    if (
        result.tier in (Tier.STATIC, Tier.DEGRADED)
        and not result.reason.startswith("kill_switch")
        and request_throttle.allow("static_tier")
    ):
        spawn(_static_tier(result, gateway))
    for attempt in result.attempts:
        if attempt.outcome != "error" or attempt.error_class not in _ALERTS:
            continue
        alert = _ALERTS[attempt.error_class]
        if alert == "credentials" and request_throttle.allow(f"auth:{attempt.provider}"):
            spawn(_raise(credentials_rejected, attempt.provider, attempt.detail))


async def _raise(raiser: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    try:
        await run_db(raiser, *args, **kwargs)
    except Exception:
        logger.exception("an alert could not be raised")


async def outages_of(gateway: Gateway, names: Iterable[str]) -> list[Outage]:
    """The named providers whose breaker is out (open or half-open, in auto): when each one's
    next probe may run, for the recovery estimate. Read in the background, never by the
    request that saw the static tier."""
    outages = []
    for name in dict.fromkeys(names):
        breaker, _ = await gateway.store.read(name)
        if breaker.mode != Mode.AUTO or breaker.state == State.CLOSED:
            continue  # an operator's override, or out for another reason: no probe to wait for
        next_probe = breaker.open_until if breaker.state == State.OPEN else 0.0
        outages.append(Outage(name, next_probe_at=next_probe, started_at=breaker.opened_at))
    return outages


# The static tier can answer before the failures behind it have opened a breaker (the first
# of three in a row): they get this long to do so before the estimate is read. In the
# background: no request waits for it.
OUTAGE_SETTLE_S = 1.0


async def _static_tier(result: RouteResult, gateway: Gateway) -> None:
    outages: list[Outage] = []
    names = [attempt.provider for attempt in result.attempts]
    try:
        outages = await outages_of(gateway, names)
        if not outages and any(a.outcome == "error" for a in result.attempts):
            await asyncio.sleep(OUTAGE_SETTLE_S)
            outages = await outages_of(gateway, names)
    except Exception:  # the shared state unreachable: the alert goes out without it
        logger.exception("the breakers could not be read for the recovery estimate")
    await _raise(static_tier_active, result.reason, outages, now=gateway.clock.wall())


def record_call(
    gateway: Gateway, routed: RouteRequest, result: RouteResult, latency_ms: int
) -> None:
    """The request's line in the call ledger, and its breaker events as incidents (both
    buffered; written off the request's path), and its metrics (in-memory increments)."""
    note_call(gateway, result)
    trace = REQUEST.get()
    if trace is not None:  # the process exports traces: the request's span says who answered
        cast(RequestSpan, trace).routed(routed, result)
    if result.events:
        note_events(result.events)
    note_trouble(result, gateway)
    prompt = routed.completion.prompt
    gateway.ledger.add(
        {
            "request_id": routed.request_id,
            "created_at": timezone.now(),
            "client": routed.client,
            "priority": routed.priority,
            "task": routed.task,
            "attempts": [attempt.as_dict() for attempt in result.attempts],
            "final_provider": result.provider,
            "model": next(
                (
                    a.model
                    for a in result.attempts
                    if a.outcome == "ok" and a.provider == result.provider
                ),
                "",
            ),
            "tier": result.tier,
            "outcome": result.outcome,
            "reason": result.reason,
            "status": result.status,
            "latency_ms": latency_ms,
            "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out,
            "tokens_estimated": result.tokens_estimated,
            "cost": result.cost,
            "cache_hit": result.cache_hit,
            "static_answer_id": result.static_answer_id,
            "prompt_hash": hashlib.sha256(prompt.encode()).hexdigest(),
            "prompt": prompt if result.store_prompt else "",
        }
    )
