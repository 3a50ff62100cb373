"""Calls waiting on a provider that has stopped answering: found while they wait, counted
against the breaker, and moved on once the breaker gives up on their provider.

A black-holed provider accepts a call and never answers; left alone, each call would wait out
its timeout (15 s by default) and the breaker would hear of none of them until then. Instead:

- **Stuck.** Each call gets a threshold from its provider's own recent latency in this
  process (`breaker.stuck_after`: a multiple of the p99 of its last answers, between the
  policy's floor and cap; a stream by its times to first token). A call still waiting past it
  is counted at once as a failure (`Sample` of a failure, error class `stuck`) and may open the
  breaker like any failure: three stuck calls open it as three refusals would. When the call
  ends after all, its end adds its spend and drops its holds but is not counted a second time
  (`Sample.counted`).
- **Moved on.** A stuck call then listens for its breaker (`breaker_watch.StuckWatch`, fed by
  every read, record and transition of this process, and polled from the store every `POLL_S`
  while a call is stuck, so another process's opening is heard too). Once the breaker has
  given up on the provider (opened, or disabled by an operator), the call is cancelled and the
  request goes on to the next provider within its deadline: the attempt is in the ledger as
  `cancelled`, error class `stuck`.
- **Gaps.** After a stream's first token, the pause allowed between two pieces follows the
  provider's recent longest pauses the same way (never longer than its timeout).

All of it is per process and costs a plain call no round trip: a timer that is cancelled when
the call answers in time.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from providers.engine import breaker
from providers.engine.breaker import BreakerState
from providers.routing.breaker_watch import POLL_S, gave_up
from providers.routing.settling import breaker_move, windows
from providers.routing.walk import Ticket, Walk
from providers.state.contract import Sample

logger = logging.getLogger(__name__)


class MovedOn(Exception):
    """The call was stuck and its breaker gave up on the provider: cancelled, to go on."""


class StuckGuard:
    """Around one call: at its threshold, count it stuck and listen for its breaker; once the
    breaker gives up, cancel the call (raising `MovedOn` from the `async with`)."""

    def __init__(self, walk: Walk, ticket: Ticket, stuck_s: float, timeout_s: float) -> None:
        self.walk, self.ticket, self.stuck_s = walk, ticket, stuck_s
        self._armed = stuck_s < timeout_s  # a call that times out first needs no guard
        self._timeout: asyncio.Timeout | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._counting: asyncio.Task[None] | None = None
        self._polling: asyncio.Task[None] | None = None
        self._moved = False

    async def __aenter__(self) -> StuckGuard:
        if self._armed:
            loop = asyncio.get_running_loop()
            self._timeout = asyncio.timeout(None)
            await self._timeout.__aenter__()
            self._timer = loop.call_later(self.stuck_s, self._on_stuck)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._timeout is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        timeout, self._timeout = self._timeout, None
        try:
            if self._counting is not None:
                self.walk.ports.stuck.unlisten(self.ticket.provider.name, self._move_on)
                if self._polling is not None:
                    self._polling.cancel()
                # The call ends while its stuck count is on its way: let it land, so the call
                # is counted exactly once (by it) and its breaker events are the request's.
                await asyncio.shield(self._counting)
        finally:
            try:
                await timeout.__aexit__(kind, exc, traceback)
            except TimeoutError:
                if self._moved:
                    raise MovedOn from None
                raise

    def _on_stuck(self) -> None:
        self._timer = None
        self.walk.ports.stuck.listen(self.ticket.provider.name, self._move_on)
        loop = asyncio.get_running_loop()
        self._counting = loop.create_task(self._count())
        self._polling = loop.create_task(self._poll())

    def _move_on(self, state: BreakerState) -> None:
        if not self._moved and self._timeout is not None and gave_up(self.ticket.state, state):
            self._moved = True
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def _count(self) -> None:
        try:
            await count_stuck(self.walk, self.ticket, self.stuck_s)
        except Exception:  # the store failed: the call still ends by its own timeout
            logger.warning(
                "a stuck call to %s could not be counted", self.ticket.provider.name, exc_info=True
            )

    async def _poll(self) -> None:
        """Another process's opening reaches this one by a read of the store (one per provider
        every `POLL_S`, however many of its calls are stuck)."""
        ports, name = self.walk.ports, self.ticket.provider.name
        while not self._moved:
            await asyncio.sleep(POLL_S)
            if ports.stuck.poll_due(name, ports.clock.mono()):
                try:
                    state, _ = await ports.store.read(name)
                except Exception:
                    logger.warning("the breaker of %s could not be read", name, exc_info=True)
                    continue
                ports.stuck.heard(name, state)


async def count_stuck(walk: Walk, ticket: Ticket, stuck_s: float) -> None:
    """One failure for a call still waiting (with its latency so far), then the breaker moved
    if that opens it; the call's end won't count it again."""
    ports, policy, name = walk.ports, walk.policy, ticket.provider.name
    ticket.counted = True
    now = ports.clock.wall()
    recorded = await ports.store.record(
        name,
        Sample(
            ok=False,
            failure=True,
            slow=breaker.is_slow(stuck_s, policy),
            over_p95=breaker.is_over_p95(stuck_s, policy),
            latency_ms=stuck_s * 1000,
        ),
        now=now,
        windows=windows(policy),
        want_stats=True,
    )
    ports.readings.forget(name)
    ports.stuck.heard(name, recorded.state)
    walk.events.extend(
        await breaker_move(
            ports,
            policy,
            name,
            recorded.state,
            recorded.stats,
            breaker.stuck_outcome(stuck_s),
            now,
            was_probe=ticket.was_probe and recorded.state.version == ticket.state.version,
        )
    )
