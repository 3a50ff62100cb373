"""Every request parameter beyond the conversation and the basic sampling ones, and what each
dialect does with it: one table, read by the adapters (what to send), by the router (which
provider can't honour a request) and by the API's documentation.

A parameter is passed (at a path of the upstream's body, or as a header), refused (a provider
of that dialect is skipped for the request, and when no provider can take it the caller gets a
400 naming it), translated (carried in the request's own terms and asked for in the dialect's
words: the thinking settings, `gateway.adapters.messages.Thinking`), or not sent for a stated
reason (the dialect has no place for it, and serving without it gives the caller what it
relies on). Nothing is dropped without the table saying so, and what a call dropped is named
to the caller (`dropped`: the answer's X-Failover-Dropped header, the ledger, the trace).
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
class Appended:
    path: str  # a list at the top of the upstream's body, the parameter's items added to it


@dataclass(frozen=True, slots=True)
class Header:
    name: str  # sent as this request header, a list joined by commas


@dataclass(frozen=True, slots=True)
class Translated:
    why: str


@dataclass(frozen=True, slots=True)
class Refused:
    why: str


@dataclass(frozen=True, slots=True)
class NotSent:
    why: str


Rule = Passed | Appended | Header | Translated | Refused | NotSent

NO_SEED = Refused("Anthropic's Messages API has no sampling seed.")
NO_PENALTY = Refused("Anthropic's Messages API has no repetition penalties.")
NO_BIAS = Refused("only OpenAI-compatible APIs take token biases.")
PLATFORM = NotSent("an OpenAI platform setting (storage, labels, tier), not part of the answer.")
OPENAI_CACHE = NotSent("a hint for OpenAI's prompt cache; this dialect caches on its own.")
CALLER_ONLY = NotSent("an id of the end user for OpenAI's abuse monitoring; none is taken here.")
CODEX_LABELS = NotSent("the client's labels of its own requests, for OpenAI's platform.")
NO_VERBOSITY = NotSent("only OpenAI's own models take a verbosity; the answer is as long as it is.")
ANTHROPIC_ONLY = NotSent("an Anthropic API feature; this dialect has no such setting.")
SPEED_ONLY = NotSent("a speed-up of OpenAI's; the answer is the same without it.")
HOSTED = NotSent("a built-in tool OpenAI runs on its side; no provider here runs it.")
# Anthropic's settings carried to Anthropic as they are and left out elsewhere: its prompt
# cache's top-level mark, where inference runs, its user profiles, its own server-side
# fallbacks, its speed and diagnostics.
ANTHROPIC_SETTINGS = (
    "cache_control",
    "inference_geo",
    "user_profile_id",
    "fallbacks",
    "fallback_credit_token",
    "speed",
    "diagnostics",
)
AS_THINKING = Translated("asked for as the request's thinking, in the dialect's words.")

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
    "reasoning_effort": {OPENAI: AS_THINKING, OLLAMA: AS_THINKING, ANTHROPIC: AS_THINKING},
    "top_k": {
        OPENAI: NotSent("OpenAI's API has no top_k; its sampling is set by temperature and top_p."),
        OLLAMA: Passed("options.top_k"),
        ANTHROPIC: Passed("top_k"),
    },
    "prompt_cache_key": {
        OPENAI: Passed("prompt_cache_key"),
        OLLAMA: OPENAI_CACHE,
        ANTHROPIC: OPENAI_CACHE,
    },
    "prompt_cache_retention": {
        OPENAI: Passed("prompt_cache_retention"),
        OLLAMA: OPENAI_CACHE,
        ANTHROPIC: OPENAI_CACHE,
    },
    "prompt_cache_options": {
        OPENAI: Passed("prompt_cache_options"),
        OLLAMA: OPENAI_CACHE,
        ANTHROPIC: OPENAI_CACHE,
    },
    "prediction": {
        OPENAI: Passed("prediction"),
        OLLAMA: SPEED_ONLY,
        ANTHROPIC: SPEED_ONLY,
    },
    "web_search_options": {
        OPENAI: Passed("web_search_options"),
        OLLAMA: HOSTED,
        ANTHROPIC: HOSTED,
    },
    "hosted_tools": {OPENAI: HOSTED, OLLAMA: HOSTED, ANTHROPIC: HOSTED},
    "safety_identifier": {
        OPENAI: Passed("safety_identifier"),
        OLLAMA: CALLER_ONLY,
        ANTHROPIC: CALLER_ONLY,
    },
    "client_metadata": {OPENAI: CODEX_LABELS, OLLAMA: CODEX_LABELS, ANTHROPIC: CODEX_LABELS},
    "verbosity": {OPENAI: Passed("verbosity"), OLLAMA: NO_VERBOSITY, ANTHROPIC: NO_VERBOSITY},
    "output_config": {OPENAI: AS_THINKING, OLLAMA: AS_THINKING, ANTHROPIC: Passed("output_config")},
    "context_management": {
        OPENAI: ANTHROPIC_ONLY,
        OLLAMA: ANTHROPIC_ONLY,
        ANTHROPIC: Passed("context_management"),
    },
    **{
        name: {OPENAI: ANTHROPIC_ONLY, OLLAMA: ANTHROPIC_ONLY, ANTHROPIC: Passed(name)}
        for name in ANTHROPIC_SETTINGS
    },
    "anthropic_tools": {
        OPENAI: NotSent(
            "Anthropic's own tools (web search, bash, the text editor …); no other "
            "kind of provider runs them."
        ),
        OLLAMA: NotSent(
            "Anthropic's own tools (web search, bash, the text editor …); no other "
            "kind of provider runs them."
        ),
        ANTHROPIC: Appended("tools"),
    },
    "anthropic_beta": {
        OPENAI: ANTHROPIC_ONLY,
        OLLAMA: ANTHROPIC_ONLY,
        ANTHROPIC: Header("anthropic-beta"),
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


def dropped(options: Iterable[tuple[str, Any]], dialect: str) -> tuple[str, ...]:
    """The parameters of `options` the dialect has no place for (not sent), in order."""
    names: list[str] = []
    for name, value in options:
        if isinstance(TABLE[name][dialect], NotSent):
            # Each built-in tool by its type: the client sees which of its tools were left out.
            if name == "hosted_tools":
                names += [f"tools.{kind}" for kind in value]
            elif name == "anthropic_tools":
                names += [f"tools.{spec['type']}" for spec in value]
            else:
                names.append(name)
    return tuple(names)


def headers(options: Iterable[tuple[str, Any]], dialect: str) -> tuple[tuple[str, str], ...]:
    """The request headers the dialect takes parameters of `options` as."""
    found = []
    for name, value in options:
        rule_ = TABLE[name][dialect]
        if isinstance(rule_, Header):
            found.append((rule_.name, ",".join(value) if isinstance(value, tuple) else value))
    return tuple(found)


def apply(payload: dict[str, Any], options: Iterable[tuple[str, Any]], dialect: str) -> None:
    """Write each passed option into `payload` at its dialect's path."""
    for name, value in options:
        found = TABLE[name][dialect]
        if isinstance(found, Appended):
            payload.setdefault(found.path, []).extend(value)
            continue
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
        elif isinstance(found, Header):
            parts.append(f"{dialect}: sent as the {found.name} header")
        elif isinstance(found, Appended):
            parts.append(f"{dialect}: sent in {found.path}")
        elif isinstance(found, Translated):
            parts.append(f"{dialect}: translated ({found.why.rstrip('.')})")
        elif isinstance(found, Refused):
            parts.append(f"{dialect}: refused ({found.why.rstrip('.')})")
        else:
            parts.append(f"{dialect}: not sent ({found.why.rstrip('.')})")
    return "; ".join(parts) + "."
