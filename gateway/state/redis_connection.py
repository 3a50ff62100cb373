"""One event loop's connection to Redis: the asyncio client and the store's Lua scripts
registered on it, each by its name (`redis_scripts.py` holds their source), so a call names the
script it runs instead of its place in a list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.state import record_script
from gateway.state import redis_scripts as scripts
from gateway.state.script_pipe import ScriptPipe


@dataclass(frozen=True, slots=True)
class Connection:
    """One event loop's client and the store's scripts registered on it, each by its name."""

    redis: Any  # redis.asyncio.Redis
    record: Any  # each an AsyncScript: called with keys= and args=, sent by its digest
    transition: Any
    acquire_probe: Any
    set_mode: Any
    seed_spend: Any
    release_probe: Any
    health_record: Any
    rate_take: Any
    reserve: Any
    holds_read: Any
    pipe: ScriptPipe | None  # the record script's own connection, where the URL allows one

    @classmethod
    def on(cls, client: Any, pipe: ScriptPipe | None = None) -> Connection:
        return cls(
            redis=client,
            pipe=pipe,
            record=client.register_script(record_script.RECORD),
            transition=client.register_script(scripts.TRANSITION),
            acquire_probe=client.register_script(scripts.ACQUIRE_PROBE),
            set_mode=client.register_script(scripts.SET_MODE),
            seed_spend=client.register_script(scripts.SEED_SPEND),
            release_probe=client.register_script(scripts.RELEASE_PROBE),
            health_record=client.register_script(scripts.HEALTH_RECORD),
            rate_take=client.register_script(scripts.RATE_TAKE),
            reserve=client.register_script(scripts.RESERVE),
            holds_read=client.register_script(scripts.HOLDS_READ),
        )
