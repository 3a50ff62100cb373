"""What a stuck call listens to (`gateway.routing.stuck`): each provider's breaker as this
process last heard it, and each provider's recent latencies, its stuck threshold's measure.
Per process; fed by every read, record and transition of the walk, at no round trip."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gateway.engine import breaker
from gateway.engine.breaker import BreakerState, Mode, State
from gateway.engine.config import PolicyConfig

POLL_S = 0.25  # how often the store is read for a provider while a call of it is stuck
SAMPLES = 128  # the recent latencies a provider's p99 is taken over
MIN_SAMPLES = 10  # fewer than this: no p99 yet (the policy's cap applies)
_REFRESH_EVERY = 16  # latencies noted between two sorts


class Latencies:
    """Each provider's recent latencies in this process, by what they measure (`answer`,
    `first_token`, `gap`), and their p99."""

    def __init__(self) -> None:
        self._rings: dict[str, deque[float]] = {}
        self._p99: dict[str, float | None] = {}
        self._unsorted: dict[str, int] = {}

    def note(self, key: str, seconds: float) -> None:
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = deque(maxlen=SAMPLES)
        ring.append(seconds)
        unsorted = self._unsorted.get(key, _REFRESH_EVERY) + 1
        if unsorted >= _REFRESH_EVERY or len(ring) <= MIN_SAMPLES:
            self._p99[key] = _p99(ring)
            unsorted = 0
        self._unsorted[key] = unsorted

    def p99(self, key: str) -> float | None:
        return self._p99.get(key)


def _p99(ring: deque[float]) -> float | None:
    if len(ring) < MIN_SAMPLES:
        return None
    ordered = sorted(ring)
    return ordered[min(len(ordered) - 1, -(-99 * len(ordered) // 100) - 1)]


def gave_up(admitted: BreakerState, heard: BreakerState) -> bool:
    """Has the breaker given up on a provider since it admitted this call? Opened (or
    half-opened again for other calls' probes), or disabled by an operator. A breaker forced
    closed never gives up. A reading older than the one the call was admitted on is no news:
    the "open" this process heard before the cooldown ended must not move on a probe the
    half-open breaker has just admitted (its slot would be spent on no call)."""
    if heard.version < admitted.version:
        return False
    if heard.mode == Mode.DISABLED:
        return True
    if heard.mode == Mode.FORCED_CLOSED:
        return False
    if heard.state == State.OPEN:
        return True
    return heard.state == State.HALF_OPEN and heard.version != admitted.version


class StuckWatch:
    """The breakers as this process last heard them, the calls listening to them, and the
    providers' recent latencies."""

    def __init__(self) -> None:
        self.latencies = Latencies()
        self._listeners: dict[str, set[Callable[[BreakerState], None]]] = {}
        self._latest: dict[str, BreakerState] = {}
        self._polled: dict[str, float] = {}

    def threshold(self, name: str, kind: str, policy: PolicyConfig) -> float:
        return breaker.stuck_after(self.latencies.p99(f"{kind}:{name}"), policy)

    def has_history(self, name: str, kind: str) -> bool:
        """Whether `name` has answered often enough here for its `kind` to be judged by."""
        return self.latencies.p99(f"{kind}:{name}") is not None

    def note(self, name: str, kind: str, seconds: float) -> None:
        """A provider's answer (`answer`), first token (`first_token`) or longest pause in a
        stream (`gap`) took `seconds`: its stuck threshold's measure."""
        self.latencies.note(f"{kind}:{name}", seconds)

    def heard(self, name: str, state: BreakerState) -> None:
        """What a read, a record or a transition said of `name`'s breaker; the calls waiting
        on it hear of a move (most replies show none, and cost a comparison)."""
        latest = self._latest.get(name)
        if (
            latest is not None
            and latest.version == state.version
            and latest.state == state.state
            and latest.mode == state.mode
        ):
            return
        self._latest[name] = state
        listeners = self._listeners.get(name)
        if listeners:
            for listener in tuple(listeners):
                listener(state)

    def latest(self, name: str) -> BreakerState | None:
        """The breaker as last heard here (a call admitted on an older reading checks it)."""
        return self._latest.get(name)

    def listen(self, name: str, listener: Callable[[BreakerState], None]) -> None:
        self._listeners.setdefault(name, set()).add(listener)

    def unlisten(self, name: str, listener: Callable[[BreakerState], None]) -> None:
        listeners = self._listeners.get(name)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._listeners[name]

    def poll_due(self, name: str, now: float) -> bool:
        """One read of the store per provider every `POLL_S`, however many calls are stuck."""
        if now - self._polled.get(name, -POLL_S) < POLL_S:
            return False
        self._polled[name] = now
        return True
