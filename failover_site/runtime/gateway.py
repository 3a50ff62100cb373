"""The serving process's parts, made once: state store, config snapshot, adapters, ledger.

`get_gateway()` is what the endpoints, the control room and the background jobs use. Tests
build their own `Gateway` with a fake clock or a particular store and install it with
`set_gateway()`. A request's walk never sees the gateway: it gets `ports()`, the store, the
clock and the adapters (`providers.routing.walk.Ports`).
"""

from __future__ import annotations

import logging

from django.conf import settings

from failover_site.runtime.ledger import LedgerWriter
from failover_site.runtime.snapshots import SnapshotHolder
from providers.adapters.pool import AdapterPool
from providers.engine.clock import Clock
from providers.routing.ports import Ports
from providers.state.contract import StateStore
from providers.state.memory_store import MemoryStore
from providers.state.redis_store import RedisStore
from providers.state.resilient_store import ResilientStore

logger = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self,
        *,
        store: StateStore,
        clock: Clock | None = None,
        ledger: LedgerWriter | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or Clock()
        self.snapshots = SnapshotHolder(store, self.clock)
        self.adapters = AdapterPool()
        self.ledger = ledger or LedgerWriter()

    @property
    def ports(self) -> Ports:
        """What a request's walk and the sentinel talk through."""
        return Ports(store=self.store, clock=self.clock, adapters=self.adapters)

    async def aclose(self) -> None:
        """Shutdown: write what the ledger holds, close the provider clients."""
        try:
            await self.snapshots.aclose()
            await self.ledger.aclose()
        finally:
            try:
                await self.adapters.aclose()
            finally:
                await self.store.aclose()


_gateway: Gateway | None = None


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
