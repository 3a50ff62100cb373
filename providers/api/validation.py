"""Validation of the frontends' request bodies: each problem answered as a 4xx naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from providers.api.json_body import ApiError, json_object
from providers.models import TASK_NAME

MAX_PROMPT_CHARS = 32_000
MAX_SYSTEM_PROMPT_CHARS = 16_000
MAX_TOKENS_LIMIT = 32_768


@dataclass(frozen=True, slots=True)
class CompleteBody:
    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


FIELDS = {
    "prompt",
    "system_prompt",
    "max_tokens",
    "temperature",
    "priority",
    "task",
    "allow_cloud",
    "cache",
    "user",
}
MAX_USER_CHARS = 256


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(400, "invalid_field", message, field)


def _max_tokens(body: dict[str, Any], name: str) -> int | None | ApiError:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return _invalid(name, f"'{name}' must be an integer.")
    if not 1 <= value <= MAX_TOKENS_LIMIT:
        return _invalid(name, f"'{name}' must be from 1 to {MAX_TOKENS_LIMIT}.")
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None | ApiError:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _invalid(name, f"'{name}' must be a number.")
    if not math.isfinite(value) or not low <= value <= high:
        return _invalid(name, f"'{name}' must be from {low:g} to {high:g}.")
    return float(value)


def parse_complete(raw: bytes) -> CompleteBody | ApiError:
    body = json_object(raw)
    if isinstance(body, ApiError):
        return body
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        return _invalid(unknown[0], f"Unknown field '{unknown[0]}'.")

    prompt = body.get("prompt")
    if prompt is None:
        return _invalid("prompt", "'prompt' is required.")
    if not isinstance(prompt, str):
        return _invalid("prompt", "'prompt' must be a string.")
    if not prompt.strip():
        return _invalid("prompt", "'prompt' cannot be blank.")
    if len(prompt) > MAX_PROMPT_CHARS:
        return _invalid("prompt", f"'prompt' may be at most {MAX_PROMPT_CHARS} characters.")

    system_prompt = body.get("system_prompt", "")
    if system_prompt is None:
        system_prompt = ""
    if not isinstance(system_prompt, str):
        return _invalid("system_prompt", "'system_prompt' must be a string.")
    if len(system_prompt) > MAX_SYSTEM_PROMPT_CHARS:
        return _invalid(
            "system_prompt",
            f"'system_prompt' may be at most {MAX_SYSTEM_PROMPT_CHARS} characters.",
        )

    max_tokens = _max_tokens(body, "max_tokens")
    if isinstance(max_tokens, ApiError):
        return max_tokens
    temperature = _number(body, "temperature", 0, 2)
    if isinstance(temperature, ApiError):
        return temperature

    routing = _routing_fields(body)
    if isinstance(routing, ApiError):
        return routing

    return CompleteBody(
        prompt=prompt,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        **routing,
    )


def _routing_fields(body: dict[str, Any]) -> dict[str, Any] | ApiError:
    """The gateway's own fields, the same on both endpoints: priority, task, allow_cloud,
    cache and user."""
    priority = body.get("priority", "normal")
    if priority not in ("normal", "high"):
        return _invalid("priority", '\'priority\' must be "normal" or "high".')

    task = body.get("task", "")
    if task is None:
        task = ""
    if not isinstance(task, str):
        return _invalid("task", "'task' must be a string.")
    if task and not TASK_NAME.fullmatch(task):
        return _invalid(
            "task", "'task' is up to 100 letters, digits, '.', '_' and '-', starting alphanumeric."
        )

    values: dict[str, Any] = {"priority": priority, "task": task}
    for name in ("allow_cloud", "cache"):
        value = body.get(name, True)
        if not isinstance(value, bool):
            return _invalid(name, f"'{name}' must be true or false.")
        values[name] = value

    user = body.get("user", "")
    if user is None:
        user = ""
    if not isinstance(user, str):
        return _invalid("user", "'user' must be a string.")
    if len(user) > MAX_USER_CHARS:
        return _invalid("user", f"'user' may be at most {MAX_USER_CHARS} characters.")
    values["user"] = user
    return values


# The OpenAI-compatible endpoint ----------------------------------------------------------------

MAX_MESSAGES = 200
MAX_STOP_SEQUENCES = 4
MAX_CONVERSATION_CHARS = 60_000

CHAT_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "user",
    "n",
    # Accepted for compatibility; they don't change how a provider is asked.
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logit_bias",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
    "logprobs",
    "response_format",
    # The gateway's own, sent by SDKs as extra body fields.
    "priority",
    "task",
    "allow_cloud",
    "cache",
}
# What this gateway can't do; said plainly rather than ignored.
UNSUPPORTED_FIELDS = {
    "tools": "Tool calls are not supported by this gateway.",
    "tool_choice": "Tool calls are not supported by this gateway.",
    "functions": "Function calls are not supported by this gateway.",
    "function_call": "Function calls are not supported by this gateway.",
    "audio": "Audio output is not supported by this gateway.",
    "modalities": "Only text output is supported by this gateway.",
    "top_logprobs": "Log probabilities are not supported by this gateway.",
    "prediction": "Predicted outputs are not supported by this gateway.",
}
SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class ChatBody:
    model: str
    prompt: str
    system_prompt: str = ""
    history: tuple[tuple[str, str], ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


def _message_text(content: Any, index: int) -> str | ApiError:
    """A message's content: a string, or text parts (`[{"type": "text", "text": ...}]`)."""
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return _invalid(where, "Only text content parts are supported.")
            if not isinstance(part.get("text"), str):
                return _invalid(where, "A text part needs a 'text' string.")
            texts.append(part["text"])
        return "\n".join(texts)
    return _invalid(where, f"'{where}' must be a string or a list of text parts.")


def _conversation(messages: Any) -> tuple[str, str, tuple[tuple[str, str], ...]] | ApiError:
    """(system prompt, question, the turns before it) from a Chat Completions message list."""
    if not isinstance(messages, list) or not messages:
        return _invalid("messages", "'messages' must be a non-empty list.")
    if len(messages) > MAX_MESSAGES:
        return _invalid("messages", f"'messages' may hold at most {MAX_MESSAGES} messages.")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return _invalid(f"messages[{index}]", "Each message must be an object.")
        role = message.get("role")
        if role == "tool" or role == "function":
            return _invalid(f"messages[{index}].role", "Tool messages are not supported.")
        if role not in (*SYSTEM_ROLES, "user", "assistant"):
            return _invalid(
                f"messages[{index}].role",
                "'role' must be one of 'system', 'developer', 'user' or 'assistant'.",
            )
        if message.get("tool_calls") or message.get("function_call"):
            return _invalid(f"messages[{index}]", "Tool calls are not supported.")
        text = _message_text(message.get("content"), index)
        if isinstance(text, ApiError):
            return text
        total += len(text)
        if role in SYSTEM_ROLES:
            system.append(text)
        else:
            turns.append((role, text))
    if total > MAX_CONVERSATION_CHARS:
        return _invalid(
            "messages", f"The messages may hold at most {MAX_CONVERSATION_CHARS} characters."
        )
    if not turns or turns[-1][0] != "user":
        return _invalid("messages", "The last message (after any system ones) must be the user's.")
    prompt = turns[-1][1]
    if not prompt.strip():
        return _invalid(f"messages[{len(messages) - 1}].content", "The question cannot be blank.")
    return "\n\n".join(system), prompt, tuple(turns[:-1])


def parse_chat(raw: bytes) -> ChatBody | ApiError:
    """A Chat Completions request, validated with OpenAI's own rules where it has them."""
    body = json_object(raw)
    if isinstance(body, ApiError):
        return body
    for name in sorted(body):
        if name in UNSUPPORTED_FIELDS and body[name] not in (None, [], False):
            return ApiError(400, "unsupported_parameter", UNSUPPORTED_FIELDS[name], name)
    unknown = sorted(set(body) - CHAT_FIELDS - set(UNSUPPORTED_FIELDS))
    if unknown:
        return _invalid(unknown[0], f"Unrecognized request argument supplied: {unknown[0]}")

    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _invalid("model", "'model' is required: \"auto\" or a provider's name.")
    conversation = _conversation(body.get("messages"))
    if isinstance(conversation, ApiError):
        return conversation
    system_prompt, prompt, history = conversation

    max_tokens = _max_tokens(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _max_tokens(body, "max_tokens")
    if isinstance(max_tokens, ApiError):
        return max_tokens
    temperature = _number(body, "temperature", 0, 2)
    if isinstance(temperature, ApiError):
        return temperature
    top_p = _number(body, "top_p", 0, 1)
    if isinstance(top_p, ApiError):
        return top_p

    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in stop)
    ):
        return _invalid("stop", f"'stop' must be a string or up to {MAX_STOP_SEQUENCES} strings.")

    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        return _invalid("n", "Only one choice per request is supported ('n' must be 1).")
    if body.get("logprobs") not in (None, False):
        return ApiError(
            400, "unsupported_parameter", "Log probabilities are not supported.", "logprobs"
        )
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        return ApiError(
            400,
            "unsupported_parameter",
            "Only the text response format is supported.",
            "response_format",
        )

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        return _invalid("stream", "'stream' must be true or false.")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            return _invalid("stream_options", "'stream_options' is only allowed with stream.")
        if not isinstance(options, dict) or not isinstance(
            options.get("include_usage", False), bool
        ):
            return _invalid("stream_options", "'stream_options.include_usage' must be a boolean.")
        include_usage = bool(options.get("include_usage", False))

    routing = _routing_fields(body)
    if isinstance(routing, ApiError):
        return routing
    return ChatBody(
        model=model,
        prompt=prompt,
        system_prompt=system_prompt,
        history=history,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=tuple(stop),
        stream=stream,
        include_usage=include_usage,
        **routing,
    )
