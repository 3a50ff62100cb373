"""What crosses the adapter contract: the request, the answer, a health check's result, and the
token counting every dialect shares."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from providers.adapters.errors import ErrorClass


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """What to ask: the question (`prompt`, the last user message), the system prompt, the
    conversation before the question as (role, text) turns, and the sampling parameters."""

    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    history: tuple[tuple[str, str], ...] = ()  # ("user" | "assistant", text), oldest first
    top_p: float | None = None
    stop: tuple[str, ...] = ()

    def messages(self, *, with_system: bool = True) -> list[dict[str, str]]:
        messages = (
            [{"role": "system", "content": self.system_prompt}]
            if self.system_prompt and with_system
            else []
        )
        messages += [{"role": role, "content": text} for role, text in self.history]
        messages.append({"role": "user", "content": self.prompt})
        return messages

    def all_text(self) -> str:
        return "\n".join((self.system_prompt, *(text for _, text in self.history), self.prompt))


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    provider: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    finish_reason: str = ""  # the provider's own word: stop, length, max_tokens, end_turn …


class HealthLevel(StrEnum):
    """How deep a health check goes, in order: each level is checked only once the one before
    has passed."""

    REACHABLE = "reachable"  # the model list answers (and, for a keyed API, takes the key)
    MODEL = "model"  # the configured model is in it
    INFERENCE = "inference"  # a one-token completion answers


@dataclass(frozen=True, slots=True)
class HealthResult:
    """One health check. `level` is the level that failed, or the deepest one that passed."""

    ok: bool
    latency_ms: float
    detail: str = ""
    error_class: ErrorClass | None = None
    level: HealthLevel | None = None


# The inference level's question: one token of answer is all it needs to see.
HEALTH_PROBE = CompletionRequest(prompt="Reply with one word: ok", max_tokens=1)


def estimate_tokens(text: str) -> int:
    """A provider-independent estimate (about four characters a token) for budgets."""
    return max(1, len(text) // 4)


# No real answer has more; a bigger count is nonsense that would not fit the ledger's column.
MAX_TOKEN_COUNT = 2**31 - 1


def token_count(value: object) -> int:
    """A token count from an upstream body, or 0 when it's missing or nonsense."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return 0
