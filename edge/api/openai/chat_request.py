"""The body of `POST /v1/chat/completions`: a Chat Completions request, validated with OpenAI's
own rules where it has them, as a table of fields (`edge/api/fields.py`) that is also the
body's schema in `/api/openapi.json`.

Tools and structured output are read in `chat_tools`. The other parameters (`seed`, penalties,
`logit_bias`, `user`, `reasoning_effort` …) are passed on or refused per dialect by one table
(`gateway/adapters/params.py`); what the gateway can't do at all (audio, log probabilities,
several choices) is refused by name rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.api.fields import (
    BodyTable,
    Field,
    JsonSchema,
    invalid,
)
from edge.api.json_body import ApiError
from edge.api.openai.chat_messages import (
    EMPTY,
    MAX_MESSAGES,
    MAX_STOP_SEQUENCES,
    MESSAGE,
    ROLES,
    conversation,
    is_empty,
)
from edge.api.openai.chat_tools import (
    RESPONSE_FORMAT_SCHEMA,
    TOOL_CHOICE_SCHEMA,
    TOOLS_SCHEMA,
    parse_response_format,
    parse_tool_choice,
    parse_tools,
)
from edge.api.validation import ROUTING_FIELDS, TEMPERATURE, max_tokens_field
from gateway.adapters import params
from gateway.adapters.messages import OutputFormat, Thinking, Tool, Turn, thinking_of_effort


def unsupported(name: str, message: str, *, empty: JsonSchema = EMPTY) -> Field:
    def refuse(value: Any, body: dict[str, Any]) -> Any:
        if is_empty(value):
            return None
        return ApiError(400, "unsupported_parameter", message, name)

    return Field(name, "any", f"Not supported: {message}", parse=refuse, fragment=empty)


# Checked first, by name, so a request that uses one hears why it can't be served.
UNSUPPORTED_FIELDS = tuple(
    unsupported(name, message)
    for name, message in sorted(
        {
            "functions": "'functions' is deprecated: send 'tools' instead.",
            "function_call": "'function_call' is deprecated: send 'tool_choice' instead.",
            "audio": "Audio output is not supported by this gateway.",
            "top_logprobs": "Log probabilities are not supported by this gateway.",
            "moderation": "Moderation is not supported by this gateway.",
        }.items()
    )
)


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


def _modalities(value: Any, body: dict[str, Any]) -> Any:
    if value is None or value == ["text"]:
        return None
    return ApiError(
        400, "unsupported_parameter", 'Only text output is supported: ["text"].', "modalities"
    )


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


def _logit_bias(value: Any, body: dict[str, Any]) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(bias, int) and not isinstance(bias, bool) and -100 <= bias <= 100
        for bias in value.values()
    ):
        return invalid("logit_bias", "'logit_bias' maps token ids to numbers from -100 to 100.")
    return value


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def option_field(name: str, kind: str, what: str, **bounds: Any) -> Field:
    """A parameter the dialect table passes on or refuses (`gateway/adapters/params.py`)."""
    return Field(name, kind, f"{what} Per provider kind: {params.described(name)}", **bounds)


CHAT_FIELDS = (
    Field(
        "model",
        "string",
        '"auto" (the cascade), the name of a provider, a model alias, or a model an enabled '
        "provider serves (gpt-4o-mini, llama3.1:8b), as far as this key may ask for it (GET "
        "/v1/models lists them): a provider is tried first, then the cascade; an alias tries "
        "its entries in turn; a served model, every provider serving it, then the cascade.",
        required=True,
        min_length=1,
        message="'model' is required: \"auto\" or a name GET /v1/models lists.",
        examples=("auto",),
    ),
    Field(
        "messages",
        "any",
        f"The conversation: roles {', '.join(ROLES)}; text content or text parts. The last "
        "message after any system ones is the user's, and not blank; as long as the body "
        "limit allows and some provider's context window takes.",
        parse=conversation,
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
        "tools",
        "any",
        "Functions the model may call (type function: name, description, parameters as a "
        "JSON Schema, strict). A provider whose settings say it can't call tools is passed "
        "over; no cached or prepared answer stands in for one that can.",
        parse=parse_tools,
        fragment=TOOLS_SCHEMA,
    ),
    Field(
        "tool_choice",
        "any",
        'none, auto, required, or {"type": "function", "function": {"name": ...}}; with tools '
        "only. Ollama is held to one tool's call through format (a name, or required with "
        "one tool); required among several tools passes it over. An answer that ignores the "
        "choice goes on to the next provider.",
        parse=parse_tool_choice,
        fragment=TOOL_CHOICE_SCHEMA,
        body_schema={
            "if": {
                "required": ["tool_choice"],
                "properties": {"tool_choice": {"not": {"type": "null"}}},
            },
            "then": {"required": ["tools"], "properties": {"tools": {"minItems": 1}}},
        },
    ),
    Field(
        "response_format",
        "any",
        "text, json_object, or json_schema (name, schema, strict): passed on to "
        "OpenAI-compatible providers, as format to Ollama, and to Anthropic as one forced tool "
        "whose input is the answer. A provider whose settings say it can't is passed over.",
        parse=parse_response_format,
        fragment=RESPONSE_FORMAT_SCHEMA,
    ),
    Field(
        "modalities",
        "any",
        'Only ["text"].',
        parse=_modalities,
        fragment={"anyOf": [{"type": "null"}, {"const": ["text"]}]},
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
    option_field("presence_penalty", "number", "A presence penalty.", minimum=-2, maximum=2),
    option_field("frequency_penalty", "number", "A frequency penalty.", minimum=-2, maximum=2),
    option_field("seed", "integer", "A sampling seed."),
    Field(
        "logit_bias",
        "any",
        f"Token biases, -100 to 100. Per provider kind: {params.described('logit_bias')}",
        parse=_logit_bias,
        fragment={
            "type": ["object", "null"],
            "additionalProperties": {"type": "integer", "minimum": -100, "maximum": 100},
        },
    ),
    option_field(
        "reasoning_effort", "string", "A reasoning model's effort.", enum=REASONING_EFFORTS
    ),
    option_field("metadata", "object", "Labels for stored completions."),
    option_field("store", "boolean", "Whether OpenAI would store the completion."),
    option_field("service_tier", "string", "OpenAI's processing tier."),
    option_field("parallel_tool_calls", "boolean", "Whether several tools may be called at once."),
    option_field(
        "prompt_cache_key", "string", "A key grouping requests for OpenAI's prompt cache."
    ),
    option_field("prompt_cache_retention", "string", "How long OpenAI keeps the prompt cached."),
    option_field("prompt_cache_options", "object", "OpenAI's prompt cache settings."),
    option_field("safety_identifier", "string", "The end user, for OpenAI's abuse monitoring."),
    option_field(
        "verbosity",
        "string",
        "How long OpenAI's model's answer runs.",
        enum=("low", "medium", "high"),
    ),
    option_field("prediction", "object", "Predicted output, to speed the answer up."),
    option_field("web_search_options", "object", "OpenAI's web search for its search models."),
)
# The table's parameters this body carries, in the table's order ("user" is a routing field).
OPTION_NAMES = tuple(name for name in params.NAMES)
CHAT_BODY = BodyTable(CHAT_FIELDS, refused=UNSUPPORTED_FIELDS)


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
    turns: tuple[Turn, ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_choice: str = ""
    output: OutputFormat | None = None
    options: tuple[tuple[str, Any], ...] = ()
    thinking: Thinking | None = None


def parse_chat(raw: bytes) -> ChatBody | ApiError:
    """A Chat Completions request, validated with OpenAI's own rules where it has them."""
    values = CHAT_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    system_prompt, prompt, history, turns = values["messages"]
    max_tokens = values["max_completion_tokens"]
    options = tuple(
        (name, values[name]) for name in OPTION_NAMES if values.get(name) not in (None, "")
    )
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
        turns=turns,
        tools=values["tools"],
        tool_choice=values["tool_choice"],
        output=values["response_format"],
        options=options,
        thinking=(
            thinking_of_effort(values["reasoning_effort"])
            if values.get("reasoning_effort")
            else None
        ),
        **{field.name: values[field.name] for field in ROUTING_FIELDS},
    )


def chat_body_schema() -> JsonSchema:
    return CHAT_BODY.schema(
        "A Chat Completions request; an unknown field is refused as OpenAI refuses it. The "
        "gateway's own priority, task, allow_cloud and cache may ride along."
    )
