"""The requests the front doors refuse before routing (a 4xx: bad JSON, an unknown field, a
wrong key, a body too large, a rate limit...): each one counted, a sample of them kept where
the control room shows them, and logged. None of it reaches the call ledger, which holds
routed requests.

- **Counted**, every one: `failover_refused_requests_total` by door, client app, error code and
  field path, in this process's Prometheus registry (`runtime/metrics.py`'s, multi-process
  mode included). Every label is bounded: the door is one of the endpoints' paths, the app a
  configured app's name, "anonymous" or "unknown key" (never a key, whole or in part), the
  code one of the doors' own, the field a well-formed path with its indices as `*`
  (`messages.*.role`), capped in length and in how many distinct ones a process labels;
  anything else is "other".
- **Kept**, a few a second per process at most (`KEEP_RATE`, on the gateway's wall clock: a
  flood costs the store a handful of writes a second, and is still counted whole): a
  `RefusalNote` in the shared state's capped list (`StateStore.refusal_add`: Redis, so the
  control room of any process sees every process's), handed over in a task of its own, at most
  `MAX_PENDING` waiting per event loop: a slow or absent Redis never holds a request up (past
  that, the refusal is counted and logged, not kept). And one WARNING line each, naming the
  door, the app, the code and the field.
- **No secret, no prompt**: the message kept is the door's own words with whatever the client
  wrote masked, then scrubbed of the caller's key and anything shaped like a credential
  (`runtime/refusal_message.py`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
from dataclasses import dataclass

from prometheus_client import Counter

from gateway.aio import LoopLocal, spawn
from gateway.state.contract import StateStore
from gateway.state.refusal_log import RefusalNote
from runtime.gateway import Gateway
from runtime.metrics import COUNTED
from runtime.refusal_message import OTHER, field_path, shown_message

logger = logging.getLogger(__name__)

UNKNOWN_KEY = "unknown key"  # a key no enabled app has (unknown, revoked, disabled, malformed)
# A sample of a flood is enough to see who is turned away and why: per process.
KEEP_PER_S = 5.0
KEEP_BURST = 20
# Hand-overs to the store waiting at once, per event loop: bounded while Redis is slow (the
# sample alone allows a burst plus a few a second for as long as a write may take).
MAX_PENDING = 64
# The field label: at most this long, and at most this many distinct ones per process.
FIELD_LABEL_LIMIT = 64
FIELD_LABELS_MAX = 200

METRIC = "failover_refused_requests"  # exposed as failover_refused_requests_total
REFUSED = Counter(
    METRIC,
    "Requests a front door refused before routing (a 4xx: bad JSON, an unknown or unsupported "
    "field, a wrong key, a body too large, a rate limit...), by door, client app ('anonymous', "
    "'unknown key'), error code and field path ('' when none; indices as *; 'other' past the "
    "labels' bounds).",
    ["door", "app", "code", "field"],
    registry=COUNTED,
)


@dataclass(frozen=True, slots=True)
class Refused:
    """A door's refusal as the door hands it over. `secrets` (the caller's key) and `body` are
    only read to clear the message, never kept."""

    door: str  # the endpoint's path
    app: str  # the client app's name, "anonymous" or `UNKNOWN_KEY`
    status: int
    code: str
    field: str | None
    message: str
    secrets: tuple[str, ...] = ()
    body: bytes = b""


# Labels ------------------------------------------------------------------------------------

# An index, as `[3]` (OpenAI's doors) or `.3` (Anthropic's).
_INDEX = re.compile(r"\[[0-9]+\]|\.[0-9]+(?=\.|\[|$)")
_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_field_labels: set[str] = set()


def field_label(path: str) -> str:
    """`path` as a metric's label: indices as `*` (`messages.*.role`), so every message of a
    conversation counts under one label; "other" past `FIELD_LABEL_LIMIT` characters or once
    this process has labelled `FIELD_LABELS_MAX` distinct fields (made-up names are endless)."""
    label = _INDEX.sub(".*", path)
    if len(label) > FIELD_LABEL_LIMIT:
        return OTHER
    if label not in _field_labels:
        if len(_field_labels) >= FIELD_LABELS_MAX:
            return OTHER
        _field_labels.add(label)
    return label


def code_label(code: str) -> str:
    return code if _CODE.fullmatch(code) else OTHER


@functools.lru_cache(maxsize=2048)
def _counter(door: str, app: str, code: str, field: str) -> Counter:
    return REFUSED.labels(door, app, code, field)


# Keeping -----------------------------------------------------------------------------------


class KeepRate:
    """A token bucket: `per_s` a second, `burst` at once, on the time it is given (the gateway's
    wall clock, which tests move). A clock that steps back refills nothing for the step, and
    goes on from where it landed."""

    def __init__(self, *, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._tokens = float(burst)
        self._last: float | None = None
        self._lock = threading.Lock()

    def allow(self, now: float) -> bool:
        with self._lock:
            if self._last is not None:
                elapsed = max(0.0, now - self._last)
                self._tokens = min(float(self.burst), self._tokens + elapsed * self.per_s)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True

    def clear(self) -> None:
        with self._lock:
            self._tokens = float(self.burst)
            self._last = None


KEEP_RATE = KeepRate(per_s=KEEP_PER_S, burst=KEEP_BURST)
_pending: LoopLocal[set[asyncio.Task[None]]] = LoopLocal(set)


def note_refusal(refused: Refused, gateway: Gateway | None) -> None:
    """Count `refused`, and if the sample takes it, log it and hand it to the shared state.
    Never waits and never raises into the door."""
    path = field_path(refused.field, refused.secrets)
    code = code_label(refused.code)
    _counter(refused.door, refused.app, code, field_label(path)).inc()
    if gateway is None:
        return  # no store to keep it in (a process serving no gateway): counted only
    now = gateway.clock.wall()
    if not KEEP_RATE.allow(now):
        return
    logger.warning(
        "refused door=%s app=%s status=%s code=%s field=%s",
        refused.door,
        json.dumps(refused.app, ensure_ascii=False),
        refused.status,
        code,
        path or "-",
        extra={"refusal": {"door": refused.door, "app": refused.app, "code": code, "field": path}},
    )
    note = RefusalNote(
        at=now,
        door=refused.door,
        app=refused.app,
        status=refused.status,
        code=code,
        field=path,
        message=shown_message(
            refused.message, field=refused.field, body=refused.body, secrets=refused.secrets
        ),
    )
    try:
        pending = _pending.get()
    except RuntimeError:
        return  # no event loop to hand it over on (a door runs on one): logged, not kept
    if len(pending) >= MAX_PENDING:
        return  # the store is slow to take them: counted and logged, not kept
    task = spawn(_kept(gateway.store, note))
    pending.add(task)
    task.add_done_callback(pending.discard)


def waiting() -> int:
    """How many of this event loop's refusals are still on their way to the store."""
    return len(_pending.get())


async def handed_over() -> None:
    """Wait for this event loop's refusals on their way to the store (a test; a shutdown)."""
    await asyncio.gather(*_pending.get())


async def _kept(store: StateStore, note: RefusalNote) -> None:
    try:
        await store.refusal_add(note)
    except Exception:  # a side channel: its failure is logged, never the request's
        logger.exception("a refusal could not be kept in the shared state")
