"""The fake provider's reading of a request (chat, Ollama's generate and show, embeddings): the
400 a real provider answers to a bad one, the answer's token limit, and whether it streams, in
each dialect's terms. Anthropic's top_k, output_config ({"effort": ...}) and context_management
are checked for their shape and taken, not acted on."""

from __future__ import annotations

import json
from typing import Any

from devtools.fake_provider import dialects
from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, OPENAI, Reply

# The Messages API's output_config.effort.
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def parse_chat(dialect: str, body: bytes) -> dict[str, Any] | Reply:
    """The chat request, or the 400 a real provider answers to it."""
    try:
        request = json.loads(body)
    except ValueError:
        return dialects.error(dialect, "bad_request", message="The request body is not valid JSON.")
    if not isinstance(request, dict):
        return dialects.error(dialect, "bad_request", message="The request body must be an object.")
    if not isinstance(request.get("model"), str) or not request["model"]:
        return dialects.error(dialect, "bad_request", message="model is required", param="model")
    if not isinstance(request.get("messages"), list):
        return dialects.error(
            dialect, "bad_request", message="messages must be a list", param="messages"
        )
    if dialect == OPENAI:
        for name in ("max_completion_tokens", "max_tokens"):
            value = request.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                return dialects.error(
                    dialect, "bad_request", message=f"{name} must be at least 1", param=name
                )
    if dialect == ANTHROPIC:
        value = request.get("max_tokens")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return dialects.error(
                dialect, "bad_request", message="max_tokens: Field required", param="max_tokens"
            )
        refused = _anthropic_options(request)
        if refused is not None:
            return dialects.error(dialect, "bad_request", message=refused)
    return request


def _anthropic_options(request: dict[str, Any]) -> str | None:
    """What Anthropic says of a malformed top_k, output_config (its effort) or
    context_management: taken, not acted on (`thinking` is `anthropic_thinking`'s)."""
    top_k = request.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            return "top_k: Input should be a valid integer"
        if top_k < 0:
            return "top_k: Input should be greater than or equal to 0"
    for name in ("output_config", "context_management"):
        value = request.get(name)
        if value is not None and not isinstance(value, dict):
            return f"{name}: Input should be a valid dictionary or object to extract fields from"
    effort = (request.get("output_config") or {}).get("effort")
    if effort is not None and effort not in ANTHROPIC_EFFORTS:
        return "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
    return None


def parse_request(dialect: str, endpoint: str, body: bytes) -> dict[str, Any] | Reply:
    """The request to a POST endpoint that is not a chat (generate, show, embed), or its 400."""
    try:
        request = json.loads(body)
    except ValueError:
        return dialects.error(dialect, "bad_request", message="The request body is not valid JSON.")
    if not isinstance(request, dict):
        return dialects.error(dialect, "bad_request", message="The request body must be an object.")
    if endpoint == "show" and isinstance(request.get("name"), str):
        request.setdefault("model", request["name"])
    if not isinstance(request.get("model"), str) or not request["model"]:
        return dialects.error(dialect, "bad_request", message="model is required", param="model")
    if endpoint == "generate" and not isinstance(request.get("prompt", ""), str):
        return dialects.error(dialect, "bad_request", message="prompt must be a string")
    if endpoint == "embed" and "input" not in request:
        message = "you must provide an input" if dialect == OLLAMA else "input is required"
        return dialects.error(dialect, "bad_request", message=message, param="input")
    return request


def chat_limit(dialect: str, request: dict[str, Any]) -> int | None:
    if dialect == ANTHROPIC:
        return int(request["max_tokens"])
    if dialect == OPENAI:
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        return limit if isinstance(limit, int) else None
    options = request.get("options")
    limit = options.get("num_predict") if isinstance(options, dict) else None
    # Ollama: num_predict -1 (or any value below 1) means no limit.
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    return None


def wants_stream(dialect: str, request: dict[str, Any]) -> bool:
    # Ollama streams unless told not to; OpenAI and Anthropic only when asked.
    return bool(request.get("stream", dialect == OLLAMA))
