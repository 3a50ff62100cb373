"""Recovery without traffic: the sentinel probes a breaker whose cooldown has ended when no
request has come to probe it.

A breaker waits for requests to probe it once its cooldown is over; at night there may be none
for hours, and a provider the sentinel reads as down gets none at all (the router skips it). So
after its checks the sentinel moves each such breaker to half-open itself and sends the probes,
one health check each (the same check it runs anyway: a one-token inference where that costs
nothing): every probe good closes it (the recovery, with its alert), one bad re-opens it with
the next cooldown. Besides the sentinel's run, every serving process looks each second
(`runtime/jobs.py` `recovery_job`), so a breaker is probed the moment its cooldown ends.
Probes are taken by the same versioned transition and probe slots as a request's, so a request
probing at the same moment shares the round, never doubles it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway.engine import breaker
from gateway.engine.breaker import Admission, BreakerEvent, Mode, State
from gateway.engine.config import PolicyConfig, ProviderConfig
from gateway.routing.settling import breaker_move, windows
from gateway.sentinel.checks import check, wants_inference
from gateway.state.contract import RecordCall, Sample

if TYPE_CHECKING:
    from gateway.routing.ports import Runtime


async def probe_idle_breakers(runtime: Runtime) -> list[BreakerEvent]:
    """Probe every enabled provider whose breaker waits for a probe; the breaker events."""
    snapshot = await runtime.snapshots.current()
    found = await asyncio.gather(*(_probe(runtime, p, snapshot.policy) for p in snapshot.providers))
    return [event for events in found for event in events]


async def _probe(
    runtime: Runtime, provider: ProviderConfig, policy: PolicyConfig
) -> list[BreakerEvent]:
    ports, name = runtime.ports, provider.name
    store = ports.store
    adapter = ports.adapters.get(provider)
    if adapter is None or (provider.api_key_env and not provider.api_key):
        return []
    state, _ = await store.read(name)
    if state.mode != Mode.AUTO or state.state == State.CLOSED:
        return []
    events: list[BreakerEvent] = []
    decision = breaker.admit(name, state, policy, ports.clock.wall())
    if decision.transition is not None:
        if not await store.transition(name, state.version, decision.transition):
            return []  # another process moved it first: its round
        ports.readings.forget(name)
        events += decision.events
        state = decision.transition
    if decision.admission != Admission.PROBE:
        return events  # still cooling down, or its probes are out
    for _ in range(policy.half_open_probes):
        if not await store.acquire_probe(
            name, state.version, policy.half_open_probes, ports.clock.wall()
        ):
            break  # requests took the round's slots: they report
        started = ports.clock.mono()
        result = await check(
            adapter,
            timeout=policy.sentinel_check_timeout_s,
            inference=wants_inference(adapter, policy),
        )
        latency_s = ports.clock.mono() - started
        now = ports.clock.wall()
        recorded = await store.record(
            RecordCall(
                name,
                Sample(
                    ok=result.ok,
                    failure=not result.ok,
                    slow=False,
                    over_p95=False,
                    latency_ms=latency_s * 1000,
                ),
                now=now,
                windows=windows(policy),
                want_stats=False,
                probe_version=state.version,
            )
        )
        outcome = breaker.Outcome(
            ok=result.ok,
            latency_s=latency_s,
            breaker_failure=not result.ok,
            error_class=result.error_class.value if result.error_class else "",
        )
        moved = await breaker_move(
            ports,
            policy,
            name,
            recorded.state,
            None,
            outcome,
            now,
            was_probe=recorded.state.version == state.version,
        )
        events += moved
        if moved or not result.ok or recorded.state.version != state.version:
            break
    return events
