"""Thinking in each dialect's words, as `tools.py` is tools': the request's `Thinking` asked of a
provider whose model thinks (Anthropic's `thinking` with a budget, OpenAI's `reasoning_effort`,
Ollama's `think`), a model's thinking read from an OpenAI-compatible answer, and what of the
request's thinking a provider's call leaves out (its own, for a model that doesn't think; the
conversation's earlier thinking, for any provider of another dialect than the one that wrote
it). Anthropic's wants of a call with thinking (a budget below max_tokens, no sampling settings
beside it, its own thinking back after a tool call) are kept here too."""

from __future__ import annotations

from typing import Any

from gateway.adapters.messages import EFFORT_BUDGETS, CompletionRequest, Thinking
from gateway.engine.config import ProviderConfig

# Anthropic's smallest thinking budget; a budget must also stay below max_tokens.
MIN_ANTHROPIC_BUDGET = 1024
# What Anthropic's extended thinking leaves no room for: it refuses each beside it.
NOT_WITH_THINKING = ("temperature", "top_p", "top_k")
# A request's effort in OpenAI's words (its most is "high" on every reasoning model) and in
# Ollama's levels (low / medium / high).
OPENAI_EFFORTS = {"max": "high"}
OLLAMA_LEVELS = {"minimal": "low", "max": "high"}
# An Ollama provider's own thinking setting as `think` (low / medium / high are sent as they are).
OLLAMA_SETTINGS: dict[str, bool | str] = {"off": False, "on": True}


def asked(request: CompletionRequest, config: ProviderConfig) -> Thinking | None:
    """The request's thinking as this provider is asked for it: None when the caller said
    nothing, or when the provider's settings say its model doesn't think (dropped)."""
    thinking = request.thinking
    if thinking is None or (thinking.on and not config.thinks):
        return None
    return thinking


def left_out(request: CompletionRequest, config: ProviderConfig, dialect: str) -> list[str]:
    """What of the request's thinking this provider's call leaves out, in the request's words:
    its thinking (a model that doesn't think), its earlier thinking ("thinking history": only
    a thinking provider of the dialect that wrote it takes it back)."""
    names = []
    thinking = request.thinking
    if thinking is not None and thinking.on and asked(request, config) is None:
        names.append("thinking")
    thoughts = [thought for turn in request.turns for thought in turn.thoughts]
    if thoughts and (not config.thinks or any(t.dialect != dialect for t in thoughts)):
        names.append("thinking history")
    return names


def anthropic_field(request: CompletionRequest, config: ProviderConfig) -> dict[str, Any] | None:
    """The request's thinking in the Messages API's words, or None when it sends none:
    adaptive as it is, else enabled with a budget (the caller's, or its effort's) below
    max_tokens. Thinking that can't fit (max_tokens at most 1024), or that would follow a tool
    call this provider made no thinking for (Anthropic wants the turn's thinking back then), is
    dropped."""
    thinking = asked(request, config)
    if thinking is None or not thinking.on or _last_call_unthought(request):
        return None
    if thinking.adaptive:
        return {"type": "adaptive"}
    limit = (request.max_tokens or 0) - 1
    budget = min(thinking.budget or EFFORT_BUDGETS[thinking.level], limit)
    if budget < MIN_ANTHROPIC_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def _last_call_unthought(request: CompletionRequest) -> bool:
    """Whether the conversation goes on from an assistant's tool call that carries no thinking
    of Anthropic's: with thinking on, Anthropic wants that turn's thinking given back."""
    for turn in reversed(request.turns):
        if turn.role == "assistant":
            return bool(turn.tool_calls) and not any(
                thought.dialect == "anthropic" for thought in turn.thoughts
            )
        if turn.role == "user":
            return False
    return False


def openai_effort(request: CompletionRequest, config: ProviderConfig) -> str:
    """`reasoning_effort` for an OpenAI-compatible provider ("" when none is sent)."""
    thinking = asked(request, config)
    if thinking is None or not thinking.on:
        return ""
    return OPENAI_EFFORTS.get(thinking.level, thinking.level)


def ollama_think(request: CompletionRequest, config: ProviderConfig) -> Any:
    """Ollama's `think`: the request's thinking where the provider's model thinks (a level
    where the provider's own thinking setting is a level, so the model takes one), else the
    setting (off / on / a level)."""
    setting = OLLAMA_SETTINGS.get(config.think, config.think)
    thinking = asked(request, config)
    if thinking is None:
        return setting
    if not thinking.on:
        return False
    if isinstance(setting, str) and (thinking.effort or thinking.budget is not None):
        return OLLAMA_LEVELS.get(thinking.level, thinking.level)
    return setting if isinstance(setting, str) else True


def note(request: CompletionRequest, config: ProviderConfig, dialect: str) -> str:
    """How the request's thinking was asked in the dialect's words, for the ledger's attempt
    ("" when it asked for none)."""
    thinking = asked(request, config)
    if thinking is None or not thinking.on:
        return ""
    if dialect == "anthropic":
        field = anthropic_field(request, config)
        if field is None:
            return ""
        if field["type"] == "adaptive":
            return "thinking asked as adaptive"
        return f"thinking asked with a budget of {field['budget_tokens']} tokens"
    if dialect == "ollama":
        return f"thinking asked as think {str(ollama_think(request, config)).lower()}"
    return f"thinking asked as reasoning_effort {openai_effort(request, config)}"


def reasoning_text(message: Any) -> str:
    """A message's (or a delta's) thinking, where an OpenAI-compatible server gives it:
    `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (OpenRouter, vLLM's
    newer)."""
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""
