"""The clock the engine reads: passed in, never looked up, so tests move it by hand."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Clock:
    """Wall time (shared across processes: breaker deadlines) and monotonic time (one
    request's own deadline). Tests pass a clock they move by hand."""

    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic
