"""What one request's route is made of: the request, its attempts, and what each attempt
carries from admission to settling. Shared by the cascade (`cascade`), the strategies and the
attempts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import Completion, CompletionRequest
from gateway.adapters.stream import CompletionStream
from gateway.engine.breaker import BreakerEvent, BreakerState
from gateway.engine.budgets import Hold
from gateway.engine.clients import ALL_STAND_INS, SHARED_CACHE, StandIn
from gateway.engine.config import BudgetConfig, PolicyConfig, ProviderConfig, Snapshot
from gateway.engine.reasons import SkipReason
from gateway.routing.ports import Ports
from gateway.routing.rate_limits import RateTicket
from gateway.state.contract import HoldRelease


class Tier(StrEnum):
    """Who gave the answer (the ledger's `tier`, the `x-failover-tier` header): the same values
    as `billing.models.Tier`, which the control plane stores."""

    PRIMARY = "primary"
    SECONDARY = "secondary"
    CACHE = "cache"
    STATIC = "static"
    DEGRADED = "degraded"
    NONE = "none"  # no answer: an error


class AttemptOutcome(StrEnum):
    """What became of one provider on a request's walk (an attempt in the ledger)."""

    OK = "ok"  # it answered
    ERROR = "error"  # it was called and failed (`error_class` says how)
    SKIPPED = "skipped"  # not called (`error_class` says why)
    CANCELLED = "cancelled"  # lost a hedged race
    HEDGED = "hedged"  # no first byte within the bound: the request went on, the call runs on


# An attempt with less time than this left isn't worth starting.
MIN_ATTEMPT_S = 0.05
# A provider passed over for what the request asks of it (its detail: "parameter: why").
CANNOT_SERVE = SkipReason.CANNOT_SERVE
# A provider passed over because the request won't fit its context window.
TOO_SMALL = SkipReason.CONTEXT_TOO_SMALL


@dataclass(frozen=True, slots=True)
class RouteRequest:
    completion: CompletionRequest
    request_id: str
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    client: str = ""
    stream: bool = False
    use_cache: bool = True
    prefer: str = ""  # a provider asked for by name: tried first, then the cascade
    # A model alias asked for: its (provider, upstream model) entries, tried in turn, then
    # with `then_cascade` the other providers by priority (without: no other provider).
    group: tuple[tuple[str, str], ...] = ()
    then_cascade: bool = True
    sticky_key: str = ""  # the user or session the weighted strategy keeps on one provider
    rate: RateTicket | None = None  # the caller's place in its window; its tokens go with a record
    # What may stand in when no provider answers (the client app's choice); none: a 503.
    stand_ins: frozenset[StandIn] = ALL_STAND_INS
    # Whose cached answers it is served and its answer kept with (`ClientConfig.cache_scope`,
    # or the anonymous callers'): the edge names the caller's.
    cache_scope: str = SHARED_CACHE


@dataclass(slots=True)
class Attempt:
    provider: str
    outcome: AttemptOutcome
    error_class: str = ""
    latency_ms: int = 0
    status: int | None = None
    detail: str = ""
    model: str = ""  # of an attempt that was made
    cost: Decimal | None = None  # what it used, at the provider's prices (None: made no call)
    dropped: tuple[str, ...] = ()  # the request's fields its call left out (`adapter.dropped`)

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"provider": self.provider, "outcome": self.outcome}
        if self.model:
            row["model"] = self.model
        if self.error_class:
            row["error_class"] = self.error_class
        if self.outcome != AttemptOutcome.SKIPPED:
            row["latency_ms"] = self.latency_ms
        if self.status is not None:
            row["status"] = self.status
        if self.detail:
            row["detail"] = self.detail
        if self.cost is not None:
            row["cost"] = str(self.cost)
        if self.dropped:
            row["dropped"] = list(self.dropped)
        return row


@dataclass(slots=True)
class Walk:
    """One request's route: what every attempt needs to know, and the ports it talks through."""

    request: RouteRequest
    snapshot: Snapshot
    ports: Ports
    deadline: float
    cache_key: str
    events: list[BreakerEvent]
    # The earliest wall time an open breaker that turned this request away lets a probe
    # through (0: none did): what a 503's Retry-After counts down to.
    probe_at: float = 0.0
    called: bool = False  # some provider was called (and failed): worth a retry at once
    # The provider (as this request would ask it) whose open breaker's cooldown ends first:
    # the one a total outage's trickle goes to (`routing/trickle.py`).
    soonest: ProviderConfig | None = None

    @property
    def policy(self) -> PolicyConfig:
        return self.snapshot.policy

    def note_open(self, open_until: float, provider: ProviderConfig | None = None) -> None:
        if open_until > 0 and (not self.probe_at or open_until < self.probe_at):
            self.probe_at = open_until
            self.soonest = provider

    def retry_after_s(self) -> int:
        """Seconds until a retry may find a provider to ask: until the earliest probe of the
        breakers that turned it away, or 1 when a provider was called (it may answer next
        time); at least 1, at most the longest cooldown."""
        if self.called or not self.probe_at:
            return 1
        wait = self.probe_at - self.ports.clock.wall()
        return max(1, min(self.policy.max_cooldown_s, math.ceil(wait)))


@dataclass(slots=True)
class Ticket:
    """An admitted call: what its settling needs."""

    provider: ProviderConfig
    adapter: ProviderAdapter
    state: BreakerState
    was_probe: bool
    budgets: list[BudgetConfig]
    keys: dict[int, tuple[str, int]]
    started: float
    # What the call asks (capped at its reservation's answer tokens) and the budget holds its
    # record settles.
    request: CompletionRequest
    release: HoldRelease | None = None
    holds: list[Hold] = field(default_factory=list)
    waiting: bool = True  # holds one of the provider's in-flight places, until `call_ended`
    counted: bool = False  # counted as a failure while still in flight (`routing/stuck.py`)
    # The request went on past the first-byte bound; the call settles alone (`routing/hedge.py`).
    hedged: bool = False
    # Its model is loading (the sentinel's verdict, or the provider's loaded models asked at
    # the bound): not counted stuck, and a timeout counts against nothing.
    loading: bool = False
    trickle: bool = False  # the call let through while every breaker is open


@dataclass(slots=True)
class AttemptResult:
    attempt: Attempt
    completion: Completion | None = None
    stream: CompletionStream | None = None
    error: ProviderError | None = None
    cost: Decimal = Decimal("0")
    ticket: Ticket | None = None  # a stream's, until it is settled

    @property
    def answered(self) -> bool:
        return self.completion is not None or self.stream is not None


@dataclass(frozen=True, slots=True)
class Refused:
    """A provider said the request itself is at fault (a 400): no other provider is asked."""

    error: ProviderError
    provider: ProviderConfig
