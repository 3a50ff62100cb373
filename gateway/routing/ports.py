"""What the engine is handed by the process that runs it: the ports a walk talks through (the
shared state and what was last heard from it, the clock, the adapters) and the source of the
current configuration snapshot.

The runtime's `Gateway` (`runtime.gateway`) is one; tests build their own. Nothing
here knows the runtime: the engine sees these few things, never the process around them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.adapters.pool import AdapterPool
from gateway.engine.breaker import BreakerEvent
from gateway.engine.clock import Clock
from gateway.engine.config import Snapshot
from gateway.routing.breaker_watch import StuckWatch
from gateway.routing.in_flight import InFlight
from gateway.routing.outage_watch import LoadingWatch, Trickle
from gateway.routing.readings import Readings
from gateway.state.contract import StateStore


@dataclass(frozen=True, slots=True)
class Ports:
    store: StateStore
    clock: Clock
    adapters: AdapterPool
    # The last replies of the shared state, so a steady request makes one round trip.
    readings: Readings = field(default_factory=lambda: Readings(max_age_s=0))
    in_flight: InFlight = field(default_factory=InFlight)
    # The breakers as last heard and the providers' latencies: what a stuck call listens to.
    stuck: StuckWatch = field(default_factory=StuckWatch)
    # Whether a provider's model is loading, asked when a call passes its first-byte bound.
    loading: LoadingWatch = field(default_factory=LoadingWatch)
    # The one call at a time this process lets through while every breaker is open.
    trickle: Trickle = field(default_factory=Trickle)
    # Where breaker events found outside a request's own steps go (a stuck call's count may
    # outlive its request): the runtime's incidents; None: the request's own events.
    note_events: Callable[[list[BreakerEvent]], None] | None = None


class SnapshotSource(Protocol):
    async def current(self) -> Snapshot: ...


class Runtime(Protocol):
    """The current snapshot and the ports: what `route`, the sentinel and the keepalive need."""

    @property
    def snapshots(self) -> SnapshotSource: ...

    @property
    def ports(self) -> Ports: ...
