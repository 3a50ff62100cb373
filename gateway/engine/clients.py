"""Who may call the API: the client apps' keys and what each one may do.

A key is `fgw_` and 43 random URL-safe characters (256 bits). Only its SHA-256 digest is kept
(the database, the snapshot): a digest of a random 256-bit secret can't be reversed or guessed,
so a slow password hash would only cost every request time for nothing. Its first 12
characters are kept in the clear as its visible prefix, so an operator can tell keys apart.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from enum import StrEnum

KEY_SCHEME = "fgw_"
PREFIX_LENGTH = 12
# Model names an app may ask for by name: "*" means any enabled provider's name.
ANY_MODEL = "*"


class StandIn(StrEnum):
    """What may stand in for a provider's answer when none comes: an answer saved earlier, a
    prepared static answer, the polite degradation message."""

    CACHED = "cached"
    STATIC = "static"
    DEGRADED = "degraded"


# A widget's choice (and the anonymous caller's): any stand-in beats an error.
ALL_STAND_INS: frozenset[StandIn] = frozenset(StandIn)

# Whose answers the answer cache keeps a request's with (`ClientConfig.cache_scope`): the apps
# an operator made share theirs, and the callers without a key, who can't be told apart. Every
# other app's scope is its own ("app:" and its name, which no word here begins with).
SHARED_CACHE = "shared"
ANONYMOUS_CACHE = "anonymous"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_new() -> tuple[str, str, str]:
    """A new key: (the key itself, shown once; its visible prefix; its digest, kept)."""
    key = KEY_SCHEME + secrets.token_urlsafe(32)
    return key, key[:PREFIX_LENGTH], key_digest(key)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """One enabled client app, as the API reads it (built with the snapshot)."""

    name: str
    key_prefix: str
    requests_per_minute: int = 0  # 0: no limit
    tokens_per_minute: int = 0
    allowed_origins: frozenset[str] = frozenset()
    allow_cloud: bool = True
    allowed_models: frozenset[str] = frozenset()
    allow_high_priority: bool = False
    can_read_status: bool = False
    # Which stand-ins its clients take for an answer; none (an agent's backend): a 503 instead.
    stand_ins: frozenset[StandIn] = ALL_STAND_INS
    # Its answers cached with every other sharing app's (a public FAQ widget), not its own.
    shared_answer_cache: bool = False

    @property
    def cache_scope(self) -> str:
        """Whose cached answers it is served, and keeps its own with: its own, unless an
        operator made it share."""
        return SHARED_CACHE if self.shared_answer_cache else f"app:{self.name}"

    def may_ask_for(self, name: str) -> bool:
        return ANY_MODEL in self.allowed_models or name in self.allowed_models


@dataclass(frozen=True, slots=True)
class Clients:
    """The client apps by key digest, and the digests of revoked or disabled keys (so their
    refusal can say so)."""

    by_digest: dict[str, ClientConfig] = field(default_factory=dict)
    refused: frozenset[str] = frozenset()

    @property
    def origins(self) -> frozenset[str]:
        """Every origin some enabled app allows: what a CORS preflight may be answered for
        (a preflight carries no key, so it can't say which app will call)."""
        return frozenset().union(*(c.allowed_origins for c in self.by_digest.values()))
