"""Every request parameter beyond the conversation and the basic sampling ones, and what each
dialect does with it: one table, read by the adapters (what to send), by the router (which
provider can't honour a request) and by the API's documentation.

A parameter is passed (at a path of the upstream's body), refused (a provider of that dialect
is skipped for the request, and when no provider can take it the caller gets a 400 naming it),
or not sent for a stated reason (it is about the caller, not the answer, and the dialect has no
place for it). Nothing is dropped without the table saying so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OPENAI, ANTHROPIC, OLLAMA = "openai", "anthropic", "ollama"


@dataclass(frozen=True, slots=True)
class Passed:
    path: str  # dotted: "seed", "options.seed", "metadata.user_id"


@dataclass(frozen=True, slots=True)
class Refused:
    why: str


@dataclass(frozen=True, slots=True)
class NotSent:
    why: str


Rule = Passed | Refused | NotSent

NO_SEED = Refused("Anthropic's Messages API has no sampling seed.")
NO_PENALTY = Refused("Anthropic's Messages API has no repetition penalties.")
NO_BIAS = Refused("only OpenAI-compatible APIs take token biases.")
PLATFORM = NotSent("an OpenAI platform setting (storage, labels, tier), not part of the answer.")

TABLE: dict[str, dict[str, Rule]] = {
    "seed": {OPENAI: Passed("seed"), OLLAMA: Passed("options.seed"), ANTHROPIC: NO_SEED},
    "presence_penalty": {
        OPENAI: Passed("presence_penalty"),
        OLLAMA: Passed("options.presence_penalty"),
        ANTHROPIC: NO_PENALTY,
    },
    "frequency_penalty": {
        OPENAI: Passed("frequency_penalty"),
        OLLAMA: Passed("options.frequency_penalty"),
        ANTHROPIC: NO_PENALTY,
    },
    "logit_bias": {OPENAI: Passed("logit_bias"), OLLAMA: NO_BIAS, ANTHROPIC: NO_BIAS},
    "reasoning_effort": {
        OPENAI: Passed("reasoning_effort"),
        OLLAMA: Refused("Ollama's thinking is set on the provider (its think setting)."),
        ANTHROPIC: Refused("Anthropic's extended thinking takes a token budget, not an effort."),
    },
    "user": {
        OPENAI: Passed("user"),
        ANTHROPIC: Passed("metadata.user_id"),
        OLLAMA: NotSent("an end user's id for a cloud's abuse monitoring; Ollama has none."),
    },
    "parallel_tool_calls": {
        OPENAI: Passed("parallel_tool_calls"),
        ANTHROPIC: Passed("tool_choice.disable_parallel_tool_use"),  # negated: see `values`
        OLLAMA: NotSent("Ollama's models call tools as they choose; it has no such switch."),
    },
    "metadata": {OPENAI: PLATFORM, OLLAMA: PLATFORM, ANTHROPIC: PLATFORM},
    "store": {OPENAI: PLATFORM, OLLAMA: PLATFORM, ANTHROPIC: PLATFORM},
    "service_tier": {OPENAI: PLATFORM, OLLAMA: PLATFORM, ANTHROPIC: PLATFORM},
}
NAMES = tuple(TABLE)


def rule(name: str, dialect: str) -> Rule:
    return TABLE[name][dialect]


def refusal(options: Iterable[tuple[str, Any]], dialect: str) -> tuple[str, str] | None:
    """The first parameter of `options` the dialect refuses, with why; None if it takes all."""
    for name, _ in options:
        found = TABLE[name][dialect]
        if isinstance(found, Refused):
            return name, found.why
    return None


def apply(payload: dict[str, Any], options: Iterable[tuple[str, Any]], dialect: str) -> None:
    """Write each passed option into `payload` at its dialect's path."""
    for name, value in options:
        found = TABLE[name][dialect]
        if not isinstance(found, Passed):
            continue
        if name == "parallel_tool_calls":
            if "tools" not in payload:
                continue  # no tools offered (OpenAI refuses it then): nothing to run in parallel
            if dialect == ANTHROPIC:
                choice = payload.setdefault("tool_choice", {"type": "auto"})
                if choice.get("type") == "none":
                    continue  # no call to make, so none in parallel (and "none" takes no more)
                value = not value
        *parents, leaf = found.path.split(".")
        target = payload
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value


def described(name: str) -> str:
    """The table's line for `name`, for the API's documentation."""
    parts = []
    for dialect, found in TABLE[name].items():
        if isinstance(found, Passed):
            parts.append(f"{dialect}: sent as {found.path}")
        elif isinstance(found, Refused):
            parts.append(f"{dialect}: refused ({found.why.rstrip('.')})")
        else:
            parts.append(f"{dialect}: not sent ({found.why.rstrip('.')})")
    return "; ".join(parts) + "."
