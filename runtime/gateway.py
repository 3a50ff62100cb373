"""The serving process's parts, made once: state store, config snapshot, adapters, ledger.

`get_gateway()` is what the endpoints, the control room and the background jobs use. Tests
build their own `Gateway` with a fake clock or a particular store and install it with
`set_gateway()`. A request's walk never sees the gateway: it gets `ports()`, the store, the
clock and the adapters (`gateway.routing.walk.Ports`).
"""

from __future__ import annotations

import logging

from django.conf import settings

from gateway.adapters.pool import AdapterPool, ClientSettings
from gateway.engine.breaker import BreakerEvent
from gateway.engine.clock import Clock
from gateway.routing.breaker_watch import StuckWatch
from gateway.routing.in_flight import InFlight
from gateway.routing.outage_watch import LoadingWatch, Trickle
from gateway.routing.ports import Ports
from gateway.routing.readings import Readings
from gateway.state.contract import StateStore
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.resilient_store import ResilientStore
from runtime.ledger import LedgerWriter
from runtime.snapshots import SnapshotHolder

logger = logging.getLogger(__name__)

READINGS_MAX_AGE_S = 0.5


class Gateway:
    def __init__(
        self,
        *,
        store: StateStore,
        clock: Clock | None = None,
        ledger: LedgerWriter | None = None,
        client_settings: ClientSettings | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or Clock()
        self.adapters = AdapterPool(client_settings or settings_for_clients())
        # With Redis, admission rides on the previous call's reply while it is this young (an
        # in-process store has no round trip to save). Other processes' moves of a closed
        # breaker are seen within it, or at once by the first call whose reply shows them.
        self.readings = Readings(max_age_s=0 if store.backend == "memory" else READINGS_MAX_AGE_S)
        self.snapshots = SnapshotHolder(store, self.clock, on_change=self.readings.clear)
        self.in_flight = InFlight()
        self.stuck = StuckWatch()  # the breakers as last heard, the providers' latencies
        self.loading = LoadingWatch()  # whether a model is loading, asked at a call's bound
        self.trickle = Trickle()  # the one call at a time while every breaker is open
        self.ledger = ledger or LedgerWriter()

    @property
    def ports(self) -> Ports:
        """What a request's walk and the sentinel talk through."""
        return Ports(
            store=self.store,
            clock=self.clock,
            adapters=self.adapters,
            readings=self.readings,
            in_flight=self.in_flight,
            stuck=self.stuck,
            loading=self.loading,
            trickle=self.trickle,
            note_events=_note_events,
        )

    async def aclose(self) -> None:
        """Shutdown: write what the ledger holds, give the budget room kept for the next calls
        back, close the provider clients."""
        try:
            await self.snapshots.aclose()
            await self.ledger.aclose()
            await self.readings.standing.release_all(self.store)
        finally:
            try:
                await self.adapters.aclose()
            finally:
                await self.store.aclose()


def _note_events(events: list[BreakerEvent]) -> None:
    from runtime.incidents import note_events  # it needs the models loaded

    note_events(events)


_gateway: Gateway | None = None


def settings_for_clients() -> ClientSettings:
    """The deployment's outbound choices, as the adapters' pool takes them."""
    return ClientSettings(
        outbound_allow=tuple(settings.OUTBOUND_ALLOW),
        http_client=settings.PROVIDER_HTTP_CLIENT,
        secret_hosts=settings.SECRET_DESTINATIONS,
        secret_loopback=settings.SECRET_DESTINATIONS_LOOPBACK,
    )


def make_store() -> StateStore:
    if settings.REDIS_URL:
        return ResilientStore(RedisStore(settings.REDIS_URL))
    return MemoryStore()


def get_gateway() -> Gateway:
    global _gateway
    if _gateway is None:
        _gateway = Gateway(store=make_store())
    return _gateway


def set_gateway(gateway: Gateway | None) -> None:
    global _gateway
    _gateway = gateway


def config_changed() -> None:
    """A control-plane change committed: every process rebuilds its snapshot (this one now)."""
    gateway = get_gateway()
    gateway.store.bump_config_version()
    gateway.snapshots.mark_stale()
    gateway.readings.clear()  # an operator's breaker override among the changes: read afresh
