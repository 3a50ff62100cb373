"""Property tests of the circuit breaker as the router drives it through the shared state.

- A state machine: Hypothesis draws a policy with small thresholds, then any sequence of
  requests arriving (one or several at once), their calls ending (answered fast or slow, failed,
  timed out, rate limited, credentials refused …, or abandoned), the clock moving forward and
  operator overrides. Requests take the router's own steps (`gateway/routing/attempts.py`:
  `admit` → `transition` → `acquire_probe`; `settle` → `record` → `transition`) against a
  MemoryStore (embedded pass) or the test Redis (services pass, where steps at once interleave
  their round trips as several processes' would). After every step the breaker is in a legal
  state, has moved only along its edges, and no half-open round has more than
  `half_open_probes` probes out.
- Many requests at once at a half-open breaker get exactly its free probe slots.
- The backoff grows with each reopen and never past its cap, whatever the policy.

The clock is the test's own number; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import Counter
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from gateway.adapters.errors import ERROR_TABLE, MAX_RETRY_AFTER_S, ErrorClass, ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.pool import AdapterPool
from gateway.engine.breaker import (
    BreakerEvent,
    BreakerState,
    EventKind,
    Mode,
    State,
    cooldown_for,
)
from gateway.engine.clock import Clock
from gateway.engine.config import PolicyConfig, ProviderConfig, Snapshot
from gateway.routing import attempts, settling
from gateway.routing.ports import Ports
from gateway.routing.walk import AttemptResult, RouteRequest, Ticket, Walk
from gateway.state import redis_store as redis_store_module
from gateway.state.contract import StateStore
from gateway.state.memory_store import MemoryStore
from gateway.state.redis_store import RedisStore
from runtime.gateway import settings_for_clients
from tests.providers.test_state_stores import close_redis_store, flush_redis, redis_url

NAME = "ollama-local"
T0 = 1_700_000_000.0
# Never called: every outcome is drawn. The adapter is the pool's real one all the same.
PROVIDER = ProviderConfig(
    name=NAME,
    kind="ollama",
    base_url="http://127.0.0.1:9",
    model="llama3.1:8b",
    priority=10,
    is_local=True,
    timeout_s=5.0,
    context_window=8192,
)
REQUEST = RouteRequest(CompletionRequest("Say hello."), request_id="property")
PROCESSES = 3  # Redis stores on one URL: serving processes sharing one breaker
TRIP_REASONS = {"consecutive_failures", "failure_rate", "slow_calls", "p95_latency"}
OPEN_REASONS = TRIP_REASONS | {"rate_limited", "auth", "probe_failed"}
# The only automatic moves: event announced → (the states it may leave, the state it enters).
MOVES: dict[EventKind, tuple[set[State], State]] = {
    EventKind.OPENED: ({State.CLOSED, State.HALF_OPEN}, State.OPEN),
    EventKind.HALF_OPENED: ({State.OPEN, State.HALF_OPEN}, State.HALF_OPEN),
    EventKind.CLOSED: ({State.HALF_OPEN}, State.CLOSED),
}

Finish = tuple[ErrorClass | None, float, float | None]  # how a call ended, its latency, Retry-After
ABANDON = "abandon"  # cancelled before it could report: a hedged race lost
Fate = Finish | str
# None: the call answered (as often as it failed). Few draws a step keep the examples cheap.
ENDINGS = st.sampled_from([*[None] * 9, *[ABANDON] * 3, *ErrorClass])


@st.composite
def fates(draw: st.DrawFn) -> Fate:
    """How a call in flight ends: abandoned, or finished as `Finish` says. The latency is drawn
    apart from the ending, so an answer may also be slow."""
    ending = draw(ENDINGS)
    if ending == ABANDON:
        return ABANDON
    latency_s = draw(st.floats(0, 60))
    retry_after_s = None
    if ending == ErrorClass.RATE_LIMITED:
        retry_after_s = draw(st.one_of(st.none(), st.floats(0, MAX_RETRY_AFTER_S)))
    return ending, latency_s, retry_after_s


FATES = fates()


@dataclass(frozen=True)
class Edge:
    """The breaker's next deadline, `offset` seconds past it."""

    offset: float


# What passes before the next thing happens: nothing, a little, a lot, or up to an edge.
WAITS = st.one_of(
    st.just(0.0),
    st.floats(0, 5),
    st.floats(0, 2 * MAX_RETRY_AFTER_S),
    st.sampled_from([Edge(-1e-3), Edge(0.0), Edge(1e-3)]),
)
Wait = float | Edge

# Most overrides back to automatic: one holds until the next, and a run spent forced
# would leave the automatic states little explored.
MODES = st.sampled_from([Mode.AUTO, Mode.AUTO, Mode.AUTO, Mode.DISABLED, Mode.FORCED_CLOSED])


@dataclass(frozen=True)
class Arrive:
    """`count` requests arriving at once."""

    after: Wait
    count: int


@dataclass(frozen=True)
class End:
    """A call in flight ends as `fate` says: the `pick`-th (round the list), or with `probe`
    the `pick`-th probe if one is out."""

    after: Wait
    fate: Fate
    pick: int
    probe: bool


@dataclass(frozen=True)
class Override:
    """An operator sets the mode, and `then` requests arrive right after it."""

    after: Wait
    mode: Mode
    then: int


@dataclass(frozen=True)
class AllAtOnce:
    """Arrivals, the calls in flight ending as `fates` says (in order; None, or past its end:
    still in flight) and perhaps an override, all at once."""

    after: Wait
    arrivals: int
    fates: tuple[Fate | None, ...]
    mode: Mode | None


Step = Arrive | End | Override | AllAtOnce


def weighted(*choices: tuple[int, st.SearchStrategy[Step]]) -> st.SearchStrategy[Step]:
    """`one_of` with each branch `weight` times. Each copy must be a strategy of its own (here a
    `map` of the branch): `one_of` drops a branch it already has, and Hypothesis hands back the
    same strategy for the same `builds`."""
    copies = [branch.map(lambda step: step) for weight, branch in choices for _ in range(weight)]
    return st.one_of(*copies)


# One rule draws every step, so the steps come in about these shares: Hypothesis picks among
# rules evenly, and an override every few steps would reset the breaker before a round could
# finish.
STEPS = weighted(
    (5, st.builds(Arrive, WAITS, st.integers(1, 6))),
    (
        2,
        st.builds(
            AllAtOnce,
            WAITS,
            st.integers(0, 4),
            st.lists(st.one_of(st.none(), FATES), max_size=8).map(tuple),
            st.one_of(st.none(), st.none(), MODES),
        ),
    ),
    (1, st.builds(Override, WAITS, MODES, st.integers(0, 3))),
    (5, st.builds(End, WAITS, FATES, st.integers(0, 30), st.booleans())),
)


@st.composite
def policies(draw: st.DrawFn) -> PolicyConfig:
    """Small thresholds, so a few dozen steps reach every state; only what the policy form
    accepts (a maximum cooldown never under the base one)."""
    cooldown_s = draw(st.integers(1, 120))
    return PolicyConfig(
        consecutive_failures=draw(st.integers(1, 4)),
        failure_rate_pct=draw(st.integers(0, 100)),
        failure_window_s=draw(st.integers(1, 300)),
        failure_min_calls=draw(st.integers(1, 6)),
        slow_call_s=draw(st.floats(0.1, 10)),
        slow_call_rate_pct=draw(st.integers(0, 100)),
        p95_latency_s=draw(st.floats(0.1, 10)),
        p95_window_s=draw(st.integers(1, 300)),
        cooldown_s=cooldown_s,
        # Mostly a gentle backoff, but any multiplier the form takes (at least 1, finite).
        cooldown_multiplier=draw(st.one_of(st.floats(1, 3), st.floats(1, sys.float_info.max))),
        max_cooldown_s=draw(st.integers(cooldown_s, 900)),
        half_open_probes=draw(st.integers(1, 4)),
        # In quarter seconds: a round's wait for its probes then ends on an exact instant.
        request_deadline_s=draw(st.integers(1, 240)) / 4,
    )


@dataclass
class Harness:
    """One event loop for a whole test: Redis clients and the adapter pool's HTTP client belong
    to the loop that made them, and opening them once keeps hundreds of examples fast."""

    backend: str
    loop: asyncio.AbstractEventLoop
    adapters: AdapterPool
    redis_stores: list[RedisStore]

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def run_together(self, coros: Sequence[Coroutine[Any, Any, Any]]) -> list[Any]:
        """All at once on the loop; on Redis their round trips interleave."""

        async def together() -> list[Any]:
            return list(await asyncio.gather(*coros))

        return self.run(together())

    def fresh(self, processes: int = 1) -> Sequence[StateStore]:
        """Stores with no breaker in them yet, as `processes` serving processes see them."""
        if self.backend == "memory":
            return [MemoryStore()]  # one process's own state
        flush_redis(redis_url())
        return self.redis_stores[:processes]


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.backend_free),
        pytest.param("redis", marks=pytest.mark.services),
    ]
)
def harness(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # The properties are the breaker's, not Redis's speed: on a loaded machine a reply can take
    # longer than the serving process's 0.5 s, which would fail an example for nothing.
    monkeypatch.setattr(redis_store_module, "SOCKET_TIMEOUT_S", 10.0)
    loop = asyncio.new_event_loop()
    stores = [RedisStore(redis_url()) for _ in range(PROCESSES)] if request.param == "redis" else []
    harness = Harness(request.param, loop, AdapterPool(settings_for_clients()), stores)

    async def close() -> None:
        await harness.adapters.aclose()
        for store in stores:
            await close_redis_store(store)

    try:
        yield harness
    finally:
        loop.run_until_complete(close())
        loop.close()
        if stores:
            flush_redis(redis_url())


def make_walk(store: StateStore, policy: PolicyConfig, adapters: AdapterPool, now: float) -> Walk:
    ports = Ports(store=store, clock=Clock(wall=lambda: now, mono=lambda: now), adapters=adapters)
    snapshot = Snapshot(version=1, providers=(PROVIDER,), policy=policy)
    return Walk(REQUEST, snapshot, ports, now + policy.request_deadline_s, "", [])


def stale(state: BreakerState, policy: PolicyConfig, now: float) -> bool:
    """A round whose every slot is taken and that heard nothing for twice the request deadline:
    its probes' processes are presumed dead (breaker.py)."""
    return now - max(state.half_opened_at, state.last_probe_at) > 2 * policy.request_deadline_s


class BreakerMachine(RuleBasedStateMachine):
    def __init__(self, harness: Harness) -> None:
        super().__init__()
        self.harness = harness
        self.store: StateStore = MemoryStore()
        self.policy = PolicyConfig()
        self.now = T0
        self.in_flight: list[Ticket] = []
        self.out: Counter[int] = Counter()  # half-open version → probes admitted, not given back
        self.seen = BreakerState()  # as the last check read it
        self.announced: list[BreakerEvent] = []  # moves the walks announced since that check
        self.overrides = 0  # and the operator's resets since then
        self.forced_version = 0
        self.waits: set[float] = set()  # every rate-limit wait a call asked for

    # --- plumbing ---------------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.harness.run(coro)

    def read(self) -> BreakerState:
        state: BreakerState = self.run(self.store.read(NAME))[0]
        return state

    def walk(self) -> Walk:
        return make_walk(self.store, self.policy, self.harness.adapters, self.now)

    def announce(self, walks: Sequence[Walk]) -> None:
        self.announced += [e for w in walks for e in w.events if e.kind in MOVES]

    def finish(self, ticket: Ticket, finish: Finish) -> tuple[Walk, Coroutine[Any, Any, Any]]:
        """A finished call, settled as the router settles it; also notes its rate-limit wait."""
        error_class, latency_s, retry_after_s = finish
        error = None
        if error_class is not None:
            error = ProviderError(error_class, "drawn", retry_after_s=retry_after_s)
            if ERROR_TABLE[error_class].cool_down:
                self.waits.add(self.policy.cooldown_s if retry_after_s is None else retry_after_s)
        walk = self.walk()
        return walk, settling.settle(walk, ticket, None, error, latency_s, cache=False)

    def settle(self, ticket: Ticket, finish: Finish) -> None:
        before = self.read()
        walk, settling = self.finish(ticket, finish)
        self.run(settling)
        self.announce([walk])
        self.check_settled(ticket, finish, before, self.read())

    async def abandon(self, ticket: Ticket) -> None:
        """A call cancelled before it could report (a hedged race lost): as `attempt` does."""
        if ticket.was_probe:
            self.out[ticket.state.version] -= 1
            await self.store.release_probe(NAME, ticket.state.version)

    def wait(self, after: Wait) -> None:
        """The clock moves on: by some seconds, or to the breaker's next deadline (the end of
        its cooldown, or of a round's wait for its probes), a hair before, at or after it."""
        if not isinstance(after, Edge):
            self.now += after
            return
        state, target = self.read(), self.now
        if state.state == State.OPEN:
            target = state.open_until
        elif state.state == State.HALF_OPEN:
            target = max(state.half_opened_at, state.last_probe_at)
            target += 2 * self.policy.request_deadline_s
        self.now = max(self.now, target + after.offset)

    def end(self, ticket: Ticket, fate: Fate) -> None:
        if fate != ABANDON:
            assert not isinstance(fate, str)
            self.settle(ticket, fate)
            return
        before = self.read()
        self.run(self.abandon(ticket))
        after = self.read()
        version = ticket.state.version
        if ticket.was_probe and (before.state, before.version) == (State.HALF_OPEN, version):
            assert after == replace(before, probes_admitted=before.probes_admitted - 1)
        else:
            assert after == before

    def admitted(self, walks: Sequence[Walk], results: Sequence[Any]) -> list[Ticket]:
        self.announce(walks)
        tickets = [r for r in results if isinstance(r, Ticket)]
        self.out.update(t.state.version for t in tickets if t.was_probe)
        self.in_flight += tickets
        return tickets

    # --- rules ------------------------------------------------------------------------------

    @initialize(policy=policies())
    def start(self, policy: PolicyConfig) -> None:
        self.policy = policy
        self.store = self.harness.fresh()[0]

    @rule(step=STEPS)
    def something_happens(self, step: Step) -> None:
        self.wait(step.after)
        if isinstance(step, Arrive):
            self.arrive(step.count)
        elif isinstance(step, End):
            if self.in_flight:
                probes = [i for i, t in enumerate(self.in_flight) if t.was_probe]
                among = probes if step.probe and probes else range(len(self.in_flight))
                self.end(self.in_flight.pop(among[step.pick % len(among)]), step.fate)
        elif isinstance(step, Override):
            self.override(step.mode)
            if step.then:
                self.arrive(step.then)
        else:
            self.all_at_once(step)

    def arrive(self, count: int) -> None:
        before = self.read()
        walks = [self.walk() for _ in range(count)]
        results = self.harness.run_together([attempts.admit(w, PROVIDER) for w in walks])
        tickets = self.admitted(walks, results)
        skipped = [r.attempt.error_class for r in results if isinstance(r, AttemptResult)]
        after, probes = self.read(), self.policy.half_open_probes
        if before.mode == Mode.DISABLED:
            assert skipped == ["disabled"] * count
        elif before.mode == Mode.FORCED_CLOSED or before.state == State.CLOSED:
            assert len(tickets) == count and not any(t.was_probe for t in tickets)
        elif before.state == State.OPEN and self.now < before.open_until:
            assert skipped == ["breaker_open"] * count
        else:  # a round starts (cooldown over, or the last one's probes lost) or goes on
            new_round = before.state == State.OPEN or (
                before.probes_admitted >= probes and stale(before, self.policy, self.now)
            )
            assert after.state == State.HALF_OPEN
            assert after.version == before.version + int(new_round)
            free = probes if new_round else max(0, probes - before.probes_admitted)
            assert len(tickets) == min(count, free)
            assert all(t.was_probe and t.state.version == after.version for t in tickets)
            assert skipped == ["probe_rejected"] * (count - len(tickets))

    def override(self, mode: Mode) -> None:
        before = self.read()
        reset = self.run(self.store.set_mode(NAME, mode))
        self.overrides += 1
        self.forced_version = reset.version
        assert reset == BreakerState(mode=mode, version=before.version + 1)

    def all_at_once(self, step: AllAtOnce) -> None:
        """Only the general checks hold here: the order things land in is the race's."""
        finishing, abandoned, staying = [], [], []
        for i, ticket in enumerate(self.in_flight):
            fate = step.fates[i] if i < len(step.fates) else None
            if fate is None:
                staying.append(ticket)
            elif fate == ABANDON:
                abandoned.append(ticket)
            else:
                assert not isinstance(fate, str)
                finishing.append(self.finish(ticket, fate))
        self.in_flight = staying
        walks = [self.walk() for _ in range(step.arrivals)]
        jobs: list[Coroutine[Any, Any, Any]] = [attempts.admit(w, PROVIDER) for w in walks]
        jobs += [settling for _, settling in finishing]
        jobs += [self.abandon(ticket) for ticket in abandoned]
        if step.mode is not None:
            jobs.append(self.store.set_mode(NAME, step.mode))
        results = self.harness.run_together(jobs)
        self.admitted(walks, results[: step.arrivals])
        self.announce([walk for walk, _ in finishing])
        if step.mode is not None:
            self.overrides += 1
            self.forced_version = results[-1].version

    # --- checks -----------------------------------------------------------------------------

    def check_settled(
        self, ticket: Ticket, finish: Finish, before: BreakerState, after: BreakerState
    ) -> None:
        """What one call's outcome does to the breaker it finds (breaker.py's docstring)."""
        error_class, latency_s, retry_after_s = finish
        rule = None if error_class is None else ERROR_TABLE[error_class]
        policy = self.policy
        failure = rule is not None and rule.breaker_failure
        # A call that moves nothing changes its failure count only (a probe's success aside).
        counted = replace(
            before, consecutive_failures=before.consecutive_failures + 1 if failure else 0
        )
        probe = ticket.was_probe and ticket.state.version == before.version
        if (
            before.mode != Mode.AUTO
            or before.state == State.OPEN
            or (before.state == State.HALF_OPEN and not probe)
        ):
            # An operator decides; or a call admitted earlier reports late: nothing moves.
            assert after == counted
            return
        backoff = cooldown_for(before.reopens, policy)
        if rule is not None and rule.cool_down:
            wait = policy.cooldown_s if retry_after_s is None else retry_after_s
            self.assert_opened(after, "rate_limited", wait, reopens=before.reopens)
        elif rule is not None and rule.opens_breaker:
            self.assert_opened(after, "auth", backoff, reopens=before.reopens + 1)
        elif before.state == State.HALF_OPEN:
            if failure:
                self.assert_opened(after, "probe_failed", backoff, reopens=before.reopens + 1)
            elif before.probes_succeeded + 1 >= policy.half_open_probes:
                assert (after.state, after.version, after.reopens) == (
                    State.CLOSED,
                    before.version + 1,
                    0,
                )
                assert after.closed_at == self.now
            else:
                assert after == replace(counted, probes_succeeded=before.probes_succeeded + 1)
        elif failure and before.consecutive_failures + 1 >= policy.consecutive_failures:
            self.assert_opened(after, "consecutive_failures", backoff, reopens=1)
        elif not failure and latency_s <= min(policy.slow_call_s, policy.p95_latency_s):
            assert after == counted  # a fast good call never trips it
        elif after.version == before.version:
            assert after == counted
        else:  # the failure rate, the slow calls or the p95 tripped it
            self.assert_opened(after, after.reason, backoff, reopens=1)
            assert after.reason in TRIP_REASONS

    def assert_opened(self, state: BreakerState, reason: str, wait: float, *, reopens: int) -> None:
        assert (state.state, state.reason, state.reopens) == (State.OPEN, reason, reopens)
        assert state.opened_at == self.now
        assert math.isclose(state.open_until - state.opened_at, wait, abs_tol=1e-6)

    @invariant()
    def the_breaker_is_in_a_legal_state(self) -> None:
        state, seen = self.read(), self.seen
        announced, overrides = self.announced, self.overrides
        self.seen, self.announced, self.overrides = state, [], 0
        # Versions only grow, and each step of one is a move announced or an override.
        assert state.version - seen.version == len(announced) + overrides
        if len(announced) == 1 and not overrides:
            sources, target = MOVES[announced[0].kind]
            assert seen.state in sources and state.state == target
        assert state.state in State and state.mode in Mode
        probes = self.policy.half_open_probes
        if state.mode != Mode.AUTO:
            # An override resets it, and nothing automatic moves it until the next one.
            assert replace(state, consecutive_failures=0) == BreakerState(
                mode=state.mode, version=self.forced_version
            )
        elif state.state == State.CLOSED:
            assert (state.probes_admitted, state.probes_succeeded) == (0, 0)
            assert (state.open_until, state.reopens) == (0.0, 0)
            assert state.consecutive_failures < self.policy.consecutive_failures
            assert state.opened_at <= state.closed_at <= self.now
        elif state.state == State.OPEN:
            assert (state.probes_admitted, state.probes_succeeded) == (0, 0)
            assert state.reason in OPEN_REASONS
            assert state.opened_at <= self.now and state.opened_at <= state.open_until
            cooldown = state.open_until - state.opened_at
            if state.reason == "rate_limited":
                assert any(math.isclose(cooldown, w, abs_tol=1e-6) for w in self.waits)
            else:
                assert state.reopens >= 1
                expected = cooldown_for(state.reopens - 1, self.policy)
                assert math.isclose(cooldown, expected, abs_tol=1e-6)
        else:
            assert state.opened_at <= state.open_until <= state.half_opened_at <= self.now
            assert state.last_probe_at <= self.now
            assert 0 <= state.probes_succeeded <= state.probes_admitted <= probes
            assert state.probes_succeeded < probes  # the last success closes it
            assert state.probes_admitted == self.out[state.version]
        # The property itself: no half-open round ever had more than N probes out at once.
        assert all(0 <= count <= probes for count in self.out.values()), self.out


def test_no_sequence_of_calls_clock_moves_and_overrides_puts_the_breaker_in_an_illegal_state(
    harness: Harness,
) -> None:
    # Redis costs a round trip a store call: fewer, shorter runs keep the pass fast. The memory
    # store explores the rules; the Redis runs check its scripts and races do the same.
    examples, steps = (200, 50) if harness.backend == "memory" else (60, 40)

    class Machine(BreakerMachine):
        def __init__(self) -> None:
            super().__init__(harness)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=True,
            database=None,
        ),
    )


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    probes=st.integers(1, 5),
    taken=st.integers(0, 5),
    contenders=st.integers(1, 30),
    processes=st.integers(1, PROCESSES),
    cooldown_over=st.booleans(),
)
def test_concurrent_requests_at_a_half_open_breaker_get_exactly_its_free_probe_slots(
    harness: Harness,
    probes: int,
    taken: int,
    contenders: int,
    processes: int,
    cooldown_over: bool,
) -> None:
    """Many requests at once, spread over serving processes, at a breaker whose cooldown just
    ended (they also race to half-open it) or that is half-open with some slots taken."""
    stores = harness.fresh(processes)
    policy = PolicyConfig(half_open_probes=probes)
    taken = 0 if cooldown_over else min(taken, probes)

    async def race() -> tuple[list[Walk], list[Any]]:
        store = stores[0]
        opened = BreakerState(
            state=State.OPEN, version=1, opened_at=T0 - 60, open_until=T0, reopens=1
        )
        assert await store.transition(NAME, 0, opened)
        if not cooldown_over:
            assert await store.transition(
                NAME, 1, replace(opened, state=State.HALF_OPEN, version=2, half_opened_at=T0)
            )
            for _ in range(taken):
                assert await store.acquire_probe(NAME, 2, probes, T0)
        walks = [
            make_walk(stores[i % len(stores)], policy, harness.adapters, T0)
            for i in range(contenders)
        ]
        return walks, await asyncio.gather(*(attempts.admit(w, PROVIDER) for w in walks))

    walks, results = harness.run(race())
    state = harness.run(stores[0].read(NAME))[0]
    tickets = [r for r in results if isinstance(r, Ticket)]
    admitted = min(probes - taken, contenders)
    assert len(tickets) == admitted
    assert all(t.was_probe and t.state.version == state.version == 2 for t in tickets)
    assert (state.state, state.probes_admitted) == (State.HALF_OPEN, taken + admitted)
    rejected = [r.attempt.error_class for r in results if isinstance(r, AttemptResult)]
    assert rejected == ["probe_rejected"] * (contenders - admitted)
    half_opened = [e for w in walks for e in w.events if e.kind == EventKind.HALF_OPENED]
    assert len(half_opened) == (1 if cooldown_over else 0)


@pytest.mark.backend_free
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    reopens=st.integers(0, 10**6),
    multiplier=st.floats(1, sys.float_info.max),
    cooldown_s=st.integers(1, 3600),
    headroom_s=st.integers(0, 86_400),
)
def test_the_cooldown_grows_with_each_reopen_and_never_past_its_cap(
    reopens: int, multiplier: float, cooldown_s: int, headroom_s: int
) -> None:
    """However long a provider stays down and whatever multiplier the form took (at least 1,
    finite): a power that overflows once raised out of `settle` and made every failed probe a
    503 instead of a fallback."""
    policy = PolicyConfig(
        cooldown_s=cooldown_s,
        cooldown_multiplier=multiplier,
        max_cooldown_s=cooldown_s + headroom_s,
    )
    this, then = cooldown_for(reopens, policy), cooldown_for(reopens + 1, policy)
    assert cooldown_s <= this <= then <= policy.max_cooldown_s
