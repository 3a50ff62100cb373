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
- **Loading.** A call whose provider's model is loading (`Ticket.loading`: the sentinel's
  verdict, or what the provider said when the call passed its first-byte bound) is never
  counted stuck: it waits for its answer, up to its timeout.
- **Gaps.** After a stream's first token, the pause allowed between two pieces follows the
  provider's recent longest pauses the same way (never longer than its timeout).

All of it is per process and costs a plain call no round trip: a timer that is cancelled when
the call answers in time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

from gateway.engine import breaker
from gateway.engine.breaker import BreakerState
from gateway.routing.breaker_watch import POLL_S, gave_up
from gateway.routing.settling import breaker_move, windows
from gateway.routing.walk import Ticket, Walk
from gateway.state.contract import RecordCall, Sample

logger = logging.getLogger(__name__)


class MovedOn(Exception):
    """The call's breaker gave up on its provider while it waited: cancelled, to go on."""


class StuckGuard:
    """Around one call: it listens for its breaker from the start (a breaker that gives up on
    the provider cancels it, raising `MovedOn` from the `async with`), and at its threshold it
    is counted stuck and polls the store for other processes' word."""

    def __init__(self, walk: Walk, ticket: Ticket, stuck_s: float, timeout_s: float) -> None:
        self.walk, self.ticket, self.stuck_s = walk, ticket, stuck_s
        self._counts = stuck_s < timeout_s  # a call that times out first is never stuck
        self._timeout: asyncio.Timeout | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._counting: asyncio.Task[None] | None = None
        self._polling: asyncio.Task[None] | None = None
        self._moved = False
        self.stuck = False  # past its threshold (counted), rather than moved on before it

    async def __aenter__(self) -> StuckGuard:
        self._timeout = asyncio.timeout(None)
        await self._timeout.__aenter__()
        if self._counts:
            self._timer = asyncio.get_running_loop().call_later(self.stuck_s, self._on_stuck)
        if self.ticket.trickle:
            # Let through while its breaker is open (`routing/trickle.py`): nothing to hear.
            return self
        watch, name = self.walk.ports.stuck, self.ticket.provider.name
        watch.listen(name, self._move_on)
        latest = watch.latest(name)
        if latest is not None:  # admitted on an older reading than this process has heard
            self._move_on(latest)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        timeout = self._timeout
        if timeout is None:
            return
        self._timeout = None  # nothing moves it on from here
        if not timeout.expired():
            # The call ended first (answered or failed): a move-on not yet delivered is void.
            timeout.reschedule(None)
        if self._timer is not None:
            self._timer.cancel()
        self.walk.ports.stuck.unlisten(self.ticket.provider.name, self._move_on)
        try:
            if self._polling is not None:
                self._polling.cancel()
            if self._counting is not None:
                # The call ends while its stuck count is on its way: let it land, so the call
                # is counted exactly once (by it).
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
        if self.ticket.loading:  # a model loading is slow, not stuck (`routing/hedge.py`)
            return
        self.stuck = True
        loop = asyncio.get_running_loop()
        self._counting = loop.create_task(self._count())
        self._polling = loop.create_task(self._poll())

    def _move_on(self, state: BreakerState) -> None:
        if not self._moved and self._timeout is not None and gave_up(self.ticket.state, state):
            self._moved = True
            self._timeout.reschedule(asyncio.get_running_loop().time())

    async def _count(self) -> None:
        try:
            state = await count_stuck(self.walk, self.ticket, self.stuck_s)
        except Exception:  # the store failed: the call still ends by its own timeout
            logger.warning(
                "a stuck call to %s could not be counted", self.ticket.provider.name, exc_info=True
            )
        else:
            self._move_on(state)

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


def stall_counter(walk: Walk, ticket: Ticket) -> Callable[[float], None]:
    """For a stream past its first token: a pause longer than its provider's usual longest
    counts it stuck (once; the stream goes on waiting, up to the provider's timeout: what the
    client has read can't be taken back)."""
    tasks: set[asyncio.Task[Any]] = set()

    def stalled(paused_s: float) -> None:
        if ticket.counted:
            return
        task = asyncio.get_running_loop().create_task(count_stuck(walk, ticket, paused_s))
        tasks.add(task)
        task.add_done_callback(_logged(tasks, ticket.provider.name))

    return stalled


def _logged(tasks: set[asyncio.Task[Any]], name: str) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("a stalled stream of %s could not be counted", name)

    return done


async def count_stuck(walk: Walk, ticket: Ticket, stuck_s: float) -> BreakerState:
    """One failure for a call still waiting (with its latency so far), then the breaker moved
    if that opens it; the call's end won't count it again. The breaker as it then is."""
    ports, policy, name = walk.ports, walk.policy, ticket.provider.name
    ticket.counted = True  # before the record: the call's end may come while it is on its way
    now = ports.clock.wall()
    try:
        recorded = await ports.store.record(
            RecordCall(
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
        )
    except BaseException:
        ticket.counted = False  # not counted after all: the call's end counts it
        raise
    ports.readings.forget(name)
    ports.stuck.heard(name, recorded.state)
    events = await breaker_move(
        ports,
        policy,
        name,
        recorded.state,
        recorded.stats,
        breaker.stuck_outcome(stuck_s),
        now,
        was_probe=ticket.was_probe and recorded.state.version == ticket.state.version,
    )
    if events and ports.note_events is not None:
        # Handed over at once: the request that counted it may be gone (its client left).
        ports.note_events(list(events))
    elif events:
        walk.events.extend(events)
    return recorded.state
