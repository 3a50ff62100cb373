"""The body of `POST /v1/chat/completions`: a Chat Completions request, validated with OpenAI's
own rules where it has them, as a table of fields (`providers/api/fields.py`) that is also the
body's schema in `/api/openapi.json`.

What the gateway can't do (tools, audio, log probabilities, JSON output) is refused by name
rather than ignored; what doesn't change how a provider is asked (penalties, `seed`,
`metadata` …) is accepted, checked for its type, and not passed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from providers.api.fields import (
    Field,
    JsonSchema,
    body_schema,
    checked,
    invalid,
    names,
    unknown_field,
)
from providers.api.json_body import ApiError, json_object
from providers.api.validation import ROUTING_FIELDS, TEMPERATURE, max_tokens_field

MAX_MESSAGES = 200
MAX_STOP_SEQUENCES = 4
MAX_CONVERSATION_CHARS = 60_000
SYSTEM_ROLES = ("system", "developer")
ROLES = (*SYSTEM_ROLES, "user", "assistant")

# A parameter the gateway can't honour may still be sent empty, as some SDKs do.
EMPTY: JsonSchema = {
    "anyOf": [{"type": "null"}, {"const": False}, {"type": "array", "maxItems": 0}]
}


def _is_empty(value: Any) -> bool:
    return value is None or value is False or value == []


def _unsupported(name: str, message: str, *, empty: JsonSchema = EMPTY) -> Field:
    def refuse(value: Any, body: dict[str, Any]) -> Any:
        if _is_empty(value):
            return None
        return ApiError(400, "unsupported_parameter", message, name)

    return Field(name, "any", f"Not supported: {message}", parse=refuse, fragment=empty)


# Checked first, by name, so a request that uses one hears why it can't be served.
UNSUPPORTED_FIELDS = tuple(
    _unsupported(name, message)
    for name, message in sorted(
        {
            "tools": "Tool calls are not supported by this gateway.",
            "tool_choice": "Tool calls are not supported by this gateway.",
            "functions": "Function calls are not supported by this gateway.",
            "function_call": "Function calls are not supported by this gateway.",
            "audio": "Audio output is not supported by this gateway.",
            "modalities": "Only text output is supported by this gateway.",
            "top_logprobs": "Log probabilities are not supported by this gateway.",
            "prediction": "Predicted outputs are not supported by this gateway.",
        }.items()
    )
)

TEXT_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
MESSAGE: JsonSchema = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": list(ROLES)},
        "content": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}],
            "description": "Text, or text parts (joined by new lines).",
        },
        "tool_calls": {**EMPTY, "description": "Not supported: tool calls."},
        "function_call": {**EMPTY, "description": "Not supported: function calls."},
    },
}


def _message_text(content: Any, index: int) -> str | ApiError:
    """A message's content: a string, or text parts (`[{"type": "text", "text": ...}]`)."""
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                return invalid(where, "Only text content parts are supported.")
            if not isinstance(part.get("text"), str):
                return invalid(where, "A text part needs a 'text' string.")
            texts.append(part["text"])
        return "\n".join(texts)
    return invalid(where, f"'{where}' must be a string or a list of text parts.")


def _conversation(messages: Any, body: dict[str, Any]) -> Any:
    """(system prompt, question, the turns before it) from a Chat Completions message list."""
    if not isinstance(messages, list) or not messages:
        return invalid("messages", "'messages' must be a non-empty list.")
    if len(messages) > MAX_MESSAGES:
        return invalid("messages", f"'messages' may hold at most {MAX_MESSAGES} messages.")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return invalid(f"messages[{index}]", "Each message must be an object.")
        role = message.get("role")
        if role == "tool" or role == "function":
            return invalid(f"messages[{index}].role", "Tool messages are not supported.")
        if role not in ROLES:
            return invalid(
                f"messages[{index}].role",
                "'role' must be one of 'system', 'developer', 'user' or 'assistant'.",
            )
        if not (_is_empty(message.get("tool_calls")) and _is_empty(message.get("function_call"))):
            return invalid(f"messages[{index}]", "Tool calls are not supported.")
        text = _message_text(message.get("content"), index)
        if isinstance(text, ApiError):
            return text
        total += len(text)
        if role in SYSTEM_ROLES:
            system.append(text)
        else:
            turns.append((role, text))
    if total > MAX_CONVERSATION_CHARS:
        return invalid(
            "messages", f"The messages may hold at most {MAX_CONVERSATION_CHARS} characters."
        )
    if not turns or turns[-1][0] != "user":
        return invalid("messages", "The last message (after any system ones) must be the user's.")
    prompt = turns[-1][1]
    if not prompt.strip():
        return invalid(f"messages[{len(messages) - 1}].content", "The question cannot be blank.")
    return "\n\n".join(system), prompt, tuple(turns[:-1])


def _stop(value: Any, body: dict[str, Any]) -> Any:
    stops = [] if value is None else [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in stops)
    ):
        return invalid("stop", f"'stop' must be a string or up to {MAX_STOP_SEQUENCES} strings.")
    return tuple(stops)


def _logprobs(value: Any, body: dict[str, Any]) -> Any:
    if value is None or value is False:
        return None
    return ApiError(
        400, "unsupported_parameter", "Log probabilities are not supported.", "logprobs"
    )


TEXT_FORMAT = {"type": "text"}


def _response_format(value: Any, body: dict[str, Any]) -> Any:
    if value is None or value == TEXT_FORMAT:
        return None
    message = "Only the text response format is supported."
    return ApiError(400, "unsupported_parameter", message, "response_format")


def _stream_options(value: Any, body: dict[str, Any]) -> Any:
    """Whether the stream ends with a usage chunk (`include_usage`)."""
    if value is None:
        return False
    if body.get("stream") is not True:
        return invalid("stream_options", "'stream_options' is only allowed with stream.")
    include_usage = value.get("include_usage", False) if isinstance(value, dict) else None
    if not isinstance(include_usage, bool):
        return invalid("stream_options", "'stream_options.include_usage' must be a boolean.")
    return include_usage


def _accepted(name: str, kind: str, what: str, **bounds: Any) -> Field:
    return Field(name, kind, f"{what} Accepted for compatibility; not passed on.", **bounds)


CHAT_FIELDS = (
    Field(
        "model",
        "string",
        '"auto" (the cascade) or the name of a provider this key may ask for (GET /v1/models '
        "lists them): that provider first, then the cascade.",
        required=True,
        min_length=1,
        message="'model' is required: \"auto\" or a provider's name.",
        examples=("auto",),
    ),
    Field(
        "messages",
        "any",
        f"The conversation: roles {', '.join(ROLES)}; text content or text parts. The last "
        "message after any system ones is the user's, and not blank; all of them together "
        f"hold at most {MAX_CONVERSATION_CHARS} characters.",
        parse=_conversation,
        fragment={"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": MESSAGE},
        examples=([{"role": "user", "content": "What are your opening hours?"}],),
    ),
    max_tokens_field("max_completion_tokens", "The longest answer, in tokens (over max_tokens)."),
    max_tokens_field("max_tokens"),
    TEMPERATURE,
    Field(
        "top_p",
        "number",
        "Nucleus sampling; the provider's own when not sent.",
        minimum=0,
        maximum=1,
    ),
    Field(
        "stop",
        "any",
        f"Where the answer stops: a string or up to {MAX_STOP_SEQUENCES} non-empty strings.",
        parse=_stop,
        fragment={
            "anyOf": [
                {"type": "null"},
                {"type": "string", "minLength": 1},
                {
                    "type": "array",
                    "maxItems": MAX_STOP_SEQUENCES,
                    "items": {"type": "string", "minLength": 1},
                },
            ]
        },
    ),
    Field(
        "n",
        "integer",
        "How many choices: only one.",
        minimum=1,
        maximum=1,
        message="Only one choice per request is supported ('n' must be 1).",
    ),
    Field(
        "logprobs",
        "any",
        "Not supported: log probabilities (false or null only).",
        parse=_logprobs,
        fragment={"enum": [False, None]},
    ),
    Field(
        "response_format",
        "any",
        'Only {"type": "text"}: JSON output formats are not supported.',
        parse=_response_format,
        fragment={
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"const": "text"}},
                    "additionalProperties": False,
                },
            ]
        },
    ),
    Field("stream", "boolean", "Stream the answer as server-sent events.", default=False),
    Field(
        "stream_options",
        "any",
        "With stream only: include_usage adds a last chunk with the token counts.",
        parse=_stream_options,
        fragment={"type": ["object", "null"], "properties": {"include_usage": {"type": "boolean"}}},
        body_schema={
            "if": {
                "required": ["stream_options"],
                "properties": {"stream_options": {"type": "object"}},
            },
            "then": {"required": ["stream"], "properties": {"stream": {"const": True}}},
        },
    ),
    *ROUTING_FIELDS,
    _accepted("presence_penalty", "number", "OpenAI's presence penalty.", minimum=-2, maximum=2),
    _accepted("frequency_penalty", "number", "OpenAI's frequency penalty.", minimum=-2, maximum=2),
    _accepted("seed", "integer", "A sampling seed."),
    _accepted("logit_bias", "object", "Token biases."),
    _accepted("metadata", "object", "Labels for stored completions."),
    _accepted("store", "boolean", "Whether OpenAI would store the completion."),
    _accepted("service_tier", "string", "OpenAI's processing tier."),
    _accepted("parallel_tool_calls", "boolean", "Tool calls in parallel (there are none)."),
)
ALL_FIELDS = (*UNSUPPORTED_FIELDS, *CHAT_FIELDS)
ALL_NAMES = names(ALL_FIELDS)


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


def parse_chat(raw: bytes) -> ChatBody | ApiError:
    """A Chat Completions request, validated with OpenAI's own rules where it has them."""
    body = json_object(raw)
    if isinstance(body, ApiError):
        return body
    refusal = checked(body, [field for field in UNSUPPORTED_FIELDS if field.name in body])
    if isinstance(refusal, ApiError):
        return refusal
    unknown = unknown_field(body, ALL_NAMES)
    if unknown is not None:
        return invalid(unknown, f"Unrecognized request argument supplied: {unknown}")
    values = checked(body, CHAT_FIELDS)
    if isinstance(values, ApiError):
        return values
    system_prompt, prompt, history = values["messages"]
    max_tokens = values["max_completion_tokens"]
    return ChatBody(
        model=values["model"],
        prompt=prompt,
        system_prompt=system_prompt,
        history=history,
        max_tokens=max_tokens if max_tokens is not None else values["max_tokens"],
        temperature=values["temperature"],
        top_p=values["top_p"],
        stop=values["stop"],
        stream=values["stream"],
        include_usage=values["stream_options"],
        **{field.name: values[field.name] for field in ROUTING_FIELDS},
    )


def chat_body_schema() -> JsonSchema:
    return body_schema(
        ALL_FIELDS,
        description="A Chat Completions request; an unknown field is refused as OpenAI "
        "refuses it. The gateway's own priority, task, allow_cloud and cache may ride along.",
    )
