"""The serving process's parts, made once: state store, config snapshot, adapters, ledger.

The ASGI lifespan builds the process's `Gateway` (`failover_site.asgi`) and hands it in through
the lifespan state, which the server copies into every request's scope: the endpoints and the
control room take it from there (`gateway_of(request)`), the in-process jobs from the
scheduler, a Celery task builds one for its run. Nothing reaches it through a module global.
Tests build their own, with a fake clock or a particular store, and hand it in the same way.
A request's walk never sees the gateway: it gets `ports`, the store, the clock and the
adapters (`gateway.routing.ports.Ports`).
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.http import HttpRequest

from gateway.adapters.image_fetch import ImageFetch
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
from runtime.ledger import LedgerWriter
from runtime.snapshots import SnapshotHolder
from runtime.tracing import Tracing

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
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        # OpenTelemetry traces of the API's requests (`runtime/tracing.py`); None: off.
        self.tracing = tracing
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
        self._ports: Ports | None = None

    @property
    def ports(self) -> Ports:
        """What a request's walk and the sentinel talk through: made once, and again only if
        the store or the clock was swapped (a test may)."""
        ports = self._ports
        if ports is None or ports.store is not self.store or ports.clock is not self.clock:
            ports = self._ports = Ports(
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
        return ports

    def config_changed(self) -> None:
        """A control-plane change committed in this process: the version moves for every
        process, and this one's snapshot is rebuilt now."""
        self.store.bump_config_version()
        self.snapshots.mark_stale()
        self.readings.clear()  # an operator's breaker override among the changes: read afresh

    async def aclose(self) -> None:
        """Shutdown: write what the ledger holds, give the budget room and the rate slots kept
        for the next calls back, export the last spans, close the provider clients."""
        try:
            await self.snapshots.aclose()
            await self.ledger.aclose()
            await self.readings.standing.release_all(self.store)
            await self.readings.slots.give_back_all(self.store, self.clock.wall())
            if self.tracing is not None:  # the spans still batched go out (bounded)
                await asyncio.to_thread(self.tracing.shutdown)
        finally:
            try:
                await self.adapters.aclose()
            finally:
                await self.store.aclose()


def _note_events(events: list[BreakerEvent]) -> None:
    from runtime.incidents import note_events  # it needs the models loaded

    note_events(events)


def settings_for_clients() -> ClientSettings:
    """The deployment's outbound choices, as the adapters' pool takes them."""
    return ClientSettings(
        outbound_allow=tuple(settings.OUTBOUND_ALLOW),
        http_client=settings.PROVIDER_HTTP_CLIENT,
        secret_hosts=settings.SECRET_DESTINATIONS,
        secret_loopback=settings.SECRET_DESTINATIONS_LOOPBACK,
        # An image fetched is held to what the same image inline could be: the body limit.
        image_fetch=ImageFetch(
            allow=tuple(settings.IMAGE_FETCH_ALLOW), max_bytes=settings.BODY_LIMIT_CHAT_BYTES
        ),
    )


def make_store() -> StateStore:
    if settings.REDIS_URL:
        # Imported here: an embedded process never loads Redis's client (about 8 MB resident).
        from gateway.state.resilient_store import RedisStore, ResilientStore

        return ResilientStore(RedisStore(settings.REDIS_URL))
    return MemoryStore()


# The key the lifespan state holds the process's gateway under (`scope["state"]`).
STATE_KEY = "gateway"


class NotServing(LookupError):
    """A request reached the application without the gateway its lifespan builds: the ASGI
    server ran without the lifespan protocol, or keeps no lifespan state."""


def gateway_of(request: HttpRequest) -> Gateway:
    """The serving process's gateway, as the lifespan handed it to this request."""
    scope = getattr(request, "scope", None)  # an ASGI request's; a WSGI request has none
    gateway = (scope or {}).get("state", {}).get(STATE_KEY)
    if gateway is None:
        raise NotServing(
            "the gateway is not started: serve the platform with an ASGI server that runs "
            "the lifespan protocol and keeps its state (uvicorn, gunicorn with uvicorn workers)"
        )
    return gateway
