"""The answer cache tier: good answers kept by what was asked, in the state store (Redis when
configured, this process's memory otherwise).

The key is a hash of the normalized conversation and the parameters that shape an answer, so
the same question asked with different spacing or case finds the same answer, and of whose
answers it is (`scope`: the client app's own, the anonymous callers', or the apps' an operator
made share theirs: `gateway/engine/clients.py` `ClientConfig.cache_scope`), so one app's
answer never stands in for another's. Only a whole, successful answer is stored; the policy
decides whether the cache serves only when every provider fails (`fallback`) or also before
asking one (`cost_saver`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from gateway.adapters.messages import CompletionRequest
from gateway.engine import codec
from gateway.state.contract import CacheWrite, StateStore

logger = logging.getLogger(__name__)

KEY_PREFIX = "cache:"
# An answer longer than this isn't worth a cache slot (nor a Redis value of that size).
MAX_CACHED_CHARS = 64_000


def _normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


# The options that change an answer (the rest are about the caller: user, metadata …).
ANSWER_OPTIONS = frozenset(
    ("seed", "presence_penalty", "frequency_penalty", "logit_bias", "top_k", "verbosity")
)


def answer_key(
    request: CompletionRequest, group: tuple[tuple[str, str], ...] = (), *, scope: str
) -> str:
    """The cache key of the answer to `request` in `scope` ("" for one that may be a tool
    call, or an embedding: no cached text can stand in for either, nor be cached as text). A
    model alias's answers (`group`: its entries, the models asked for) are kept apart from the
    cascade's and from other aliases'."""
    if request.uses_tools or request.embed or request.turns:  # a conversation of turns: images
        return ""
    shape: dict[str, Any] = {
        "scope": scope,
        "system": _normalized(request.system_prompt),
        "history": [[role, _normalized(text)] for role, text in request.history],
        "prompt": _normalized(request.prompt),
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stop": list(request.stop),
    }
    if request.output is not None:  # a JSON answer is an answer to its format only
        output = request.output
        shape["output"] = [output.kind, output.name, output.schema, output.strict]
    thinking = request.thinking
    if thinking is not None:  # thinking asked for changes the answer (and off is the default)
        shape["thinking"] = [thinking.on, thinking.level, thinking.budget, thinking.adaptive]
    if group:
        shape["models"] = [list(entry) for entry in group]
    shaping = [[name, value] for name, value in request.options if name in ANSWER_OPTIONS]
    if shaping:
        shape["options"] = shaping
    encoded = codec.dumps(shape)
    return KEY_PREFIX + hashlib.sha256(encoded).hexdigest()


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    text: str
    provider: str
    saved_at: float  # wall time

    def age_s(self, now: float) -> int:
        return max(0, int(now - self.saved_at))


def cache_write(key: str, text: str, provider: str, now: float, ttl_s: int) -> CacheWrite | None:
    if not key or not text.strip() or len(text) > MAX_CACHED_CHARS:
        return None
    value = codec.dumps_text({"text": text, "provider": provider, "saved_at": now})
    return CacheWrite(key, value, ttl_s)


async def cache_read(store: StateStore, key: str) -> CachedAnswer | None:
    """The saved answer, or None. A cache that can't be read is a miss, never an error."""
    try:
        raw = await store.cache_get(key)
    except Exception:
        logger.exception("the answer cache could not be read")
        return None
    if raw is None:
        return None
    try:
        decoded = codec.loads(raw)
        return CachedAnswer(
            str(decoded["text"]), str(decoded["provider"]), float(decoded["saved_at"])
        )
    except (ValueError, KeyError, TypeError):
        logger.warning("an unreadable answer-cache entry was ignored: %s", key)
        return None
