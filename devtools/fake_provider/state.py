"""The fake provider's run-time state (`FakeState`): the current config and the one `reset`
returns to, the call counters, what each call carried, error_rate's running share, the loading
mode's load, slow's and stall's jittered waits, and the server's hook that refuses connections.

A config (`config.FakeConfig`) is an immutable value swapped whole under the state's lock, so the
server thread always reads one consistent snapshot while a test thread changes it.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from devtools.fake_provider.config import FakeConfig


class FakeState:
    """The current config, the config `reset` returns to, and the call counters."""

    def __init__(self, defaults: FakeConfig) -> None:
        self._lock = threading.Lock()
        self.defaults = defaults
        self.config = defaults
        self._calls = 0
        self._by_path: dict[str, int] = {}
        self._last: dict[str, tuple[bytes, Any, bytes]] = {}  # path → (body, headers, query)
        # error_rate without randomness: the share accumulates per call and a call fails each
        # time it reaches 1, so 0.25 fails exactly every 4th call.
        self._error_debt = 0.0
        self._random = random.Random()
        # Set by the fake's own server (`FakeProviderServer`): closes the listener for the
        # given seconds, dropping every connection but the one passed.
        self.refuser: Callable[[float, object], Awaitable[bool]] | None = None
        self._load_started: float | None = None  # the loading mode's load, on the loop's clock

    def load_wait_s(self, config: FakeConfig, now: float) -> float:
        """The loading mode: a call's wait at `now` for the load (the first one starts it)."""
        with self._lock:
            if self._load_started is None:
                self._load_started = now
            return max(0.0, self._load_started + config.load_ms / 1000 - now)

    def model_loaded(self, config: FakeConfig, now: float) -> bool:
        """Whether /api/ps lists the models: but in the loading mode before its load, always."""
        if config.mode != "loading":
            return True
        with self._lock:
            started = self._load_started
        return started is not None and now >= started + config.load_ms / 1000

    def wait_s(self, config: FakeConfig) -> float:
        """slow's and stall's wait for one call: delay_ms ± jitter_ms, in seconds."""
        jitter = (
            self._random.uniform(-config.jitter_ms, config.jitter_ms) if config.jitter_ms else 0
        )
        return max(0.0, config.delay_ms + jitter) / 1000

    def record(self, path: str, *, chat: bool) -> tuple[FakeConfig, bool]:
        """Count a call to `path`: the config it runs under, and whether error_rate fails it."""
        with self._lock:
            config = self.config
            self._by_path[path] = self._by_path.get(path, 0) + 1
            if chat:
                self._calls += 1
            fail = False
            if (
                config.error_rate
                and config.mode in ("ok", "slow", "stall")
                and (chat or config.scope == "all")
            ):
                self._error_debt += config.error_rate
                if self._error_debt >= 1 - 1e-9:
                    self._error_debt -= 1
                    fail = True
            return config, fail

    def update(self, changes: Mapping[str, Any]) -> FakeConfig:
        with self._lock:
            self.config = self.config.updated(changes)
            if "error_rate" in changes:
                self._error_debt = 0.0
            if "mode" in changes or "load_ms" in changes:
                self._load_started = None  # unloaded: the next call loads it again
            return self.config

    def reset(self) -> FakeConfig:
        with self._lock:
            self.config = self.defaults
            self._calls = 0
            self._by_path = {}
            self._last = {}
            self._error_debt = 0.0
            self._load_started = None
            return self.config

    def remember(self, path: str, body: bytes, headers: Any, query: bytes = b"") -> None:
        """Keep what a call to `path` carried, as it came (its body, its raw header pairs and
        query string): read back, and decoded, only when a test asks (`last_request`)."""
        with self._lock:
            self._last[path] = (body, headers, query)

    def last_request(self, path: str) -> dict[str, Any] | None:
        """The last call to `path`: {"body": decoded JSON (None when it did not parse),
        "headers": {lower-case name: value}, "query": the raw query string}; None before any
        call (or after `reset`)."""
        with self._lock:
            last = self._last.get(path)
        if last is None:
            return None
        body, headers, query = last
        try:
            decoded = json.loads(body) if body else None
        except ValueError:
            decoded = None
        return {
            "body": decoded,
            "headers": {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers
            },
            "query": query.decode("latin-1"),
        }

    @property
    def calls(self) -> int:
        return self._calls

    def calls_to(self, path: str) -> int:
        with self._lock:
            return self._by_path.get(path, 0)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": self._calls,
                "by_path": dict(self._by_path),
                "config": self.config.to_dict(),
            }
