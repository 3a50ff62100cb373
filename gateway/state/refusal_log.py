"""The last requests the front doors refused, as the shared state keeps them for the control
room: a capped list, newest first (Redis's `fo:refusals`, or this process's memory).

A note holds only what an operator may read: when, which door, which client app, the status,
the error code, the field and a message already cleared of anything the client wrote
(`runtime/refusals.py` makes it). What it was written from never reaches the store.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from gateway.engine import codec

# How many refusals the store keeps: enough to see which agent is turned away and for what,
# few enough that the list (and its page) stays small. Past it the oldest go.
REFUSALS_KEPT = 200
REFUSALS_KEY = "fo:refusals"


@dataclass(frozen=True, slots=True)
class RefusalNote:
    at: float  # wall time
    door: str  # the endpoint's path
    app: str  # the client app's name, "anonymous" or "unknown key"
    status: int
    code: str
    field: str  # the field at fault ("" when none is)
    message: str


def note_encoded(note: RefusalNote) -> str:
    return codec.dumps_text(asdict(note))


def note_decoded(raw: str | bytes) -> RefusalNote | None:
    """The note, or None for an entry that isn't one (written by another version, say)."""
    try:
        values: Any = codec.loads(raw)
        return RefusalNote(
            at=float(values["at"]),
            door=str(values["door"]),
            app=str(values["app"]),
            status=int(values["status"]),
            code=str(values["code"]),
            field=str(values["field"]),
            message=str(values["message"]),
        )
    except (ValueError, TypeError, KeyError):
        return None


class RefusalRing:
    """The in-process store's list: the embedded mode's, and Redis's stand-in while it is down.
    Made on first use (`MemoryStore` keeps its own `__init__`); one lock, as the store serves
    every event loop of the process."""

    _refusals: deque[RefusalNote] | None = None
    _refusals_lock = threading.Lock()

    def _ring(self) -> deque[RefusalNote]:
        with self._refusals_lock:
            if self._refusals is None:
                self._refusals = deque(maxlen=REFUSALS_KEPT)
            return self._refusals

    async def refusal_add(self, note: RefusalNote) -> None:
        ring = self._ring()
        with self._refusals_lock:
            ring.appendleft(note)

    async def refusals_read(self, count: int = REFUSALS_KEPT) -> list[RefusalNote]:
        ring = self._ring()
        with self._refusals_lock:
            return list(ring)[: max(0, count)]
