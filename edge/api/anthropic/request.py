"""The body of `POST /v1/messages` (and `/v1/messages/count_tokens`): Anthropic's Messages
API, read into the same `CompletionRequest` a Chat Completions request becomes, as a table of
fields (`edge/api/fields.py`) with Anthropic's rules: `max_tokens` required, `temperature`
from 0 to 1, an unknown field refused as Anthropic refuses it.

`model` is read as on the OpenAI endpoints (`auto`, a provider, a model alias, or a model a
provider serves), so an Anthropic client names the gateway's models, not Claude's. Extended
thinking (`thinking`, `output_config.effort`) becomes the request's `Thinking`, asked of each
provider in its own words; Anthropic's own settings (`context_management`, `top_k`, the
`anthropic-beta` header) are carried to Anthropic and dropped elsewhere, named in the answer's
X-Failover-Dropped header. What needs Anthropic's own machinery and has no stand-in (MCP
servers, containers) is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from edge.api.anthropic.conversation import (
    MESSAGES_SCHEMA,
    METADATA_SCHEMA,
    STOP_SEQUENCES_SCHEMA,
    SYSTEM_SCHEMA,
    parse_messages,
    parse_metadata,
    parse_stop_sequences,
    parse_system,
)
from edge.api.anthropic.thinking import (
    CONTEXT_MANAGEMENT_SCHEMA,
    OUTPUT_CONFIG_SCHEMA,
    OUTPUT_FORMAT_SCHEMA,
    THINKING_SCHEMA,
    parse_context_management,
    parse_output_config,
    parse_output_format,
    parse_thinking,
)
from edge.api.anthropic.tools import (
    TOOL_CHOICE_SCHEMA,
    TOOLS_SCHEMA,
    parse_tool_choice,
    parse_tools,
)
from edge.api.fields import BodyTable, Field, JsonSchema
from edge.api.json_body import ApiError
from edge.api.openai.chat_request import CHAT_FIELDS, unsupported
from edge.api.validation import MAX_TOKENS_LIMIT, ROUTING_FIELDS
from gateway.adapters import params
from gateway.adapters.messages import CompletionRequest

# Anthropic's largest output; past the gateway's own limit a request asks for that limit.
MAX_TOKENS_TAKEN = 128_000
UNSUPPORTED_FIELDS = (
    unsupported("container", "containers are Anthropic's code execution: not run here."),
    unsupported("mcp_servers", "MCP servers are not run by this gateway: offer them as tools."),
)
# The extra field Anthropic's API names for anything else.
ANTHROPIC_UNKNOWN = "{name}: Extra inputs are not permitted"
_CHAT = {field.name: field for field in CHAT_FIELDS}
MODEL = _CHAT["model"]
MESSAGES = Field(
    "messages",
    "any",
    "The conversation: user and assistant messages, each a string or content blocks (text; "
    "tool_use in an assistant's, tool_result in a user's). The last is the user's.",
    parse=parse_messages,
    fragment=MESSAGES_SCHEMA,
    examples=([{"role": "user", "content": "What are your opening hours?"}],),
)
SYSTEM = Field(
    "system",
    "any",
    "The system prompt: a string or text blocks.",
    parse=parse_system,
    fragment=SYSTEM_SCHEMA,
)
TOOLS = Field(
    "tools",
    "any",
    "Client tools (name, description, input_schema); server tools are refused. A provider "
    "whose settings say it can't call tools is passed over.",
    parse=parse_tools,
    fragment=TOOLS_SCHEMA,
)
TOOL_CHOICE = Field(
    "tool_choice",
    "any",
    '{"type": "auto" | "any" | "none" | "tool", "name", "disable_parallel_tool_use"}; with '
    "tools only.",
    parse=parse_tool_choice,
    fragment=TOOL_CHOICE_SCHEMA,
)
THINKING = Field(
    "thinking",
    "any",
    'Extended thinking: {"type": "enabled", "budget_tokens": N}, {"type": "adaptive"} or '
    '{"type": "disabled"}. Asked of each provider whose model thinks in its own words '
    "(Anthropic's thinking, OpenAI's reasoning_effort, Ollama's think); what the model "
    "thought comes back as thinking blocks. Dropped for a provider whose model doesn't think.",
    parse=parse_thinking,
    fragment=THINKING_SCHEMA,
)
OUTPUT_CONFIG = Field(
    "output_config",
    "any",
    '{"effort": "low" | "medium" | "high" | "max", "format": {"type": "json_schema", '
    "\"schema\": {...}}}: the effort is the thinking's, the format the answer's JSON. "
    f"{params.described('output_config')}",
    parse=parse_output_config,
    fragment=OUTPUT_CONFIG_SCHEMA,
)
CONTEXT_MANAGEMENT = Field(
    "context_management",
    "any",
    "Anthropic's context editing (clearing old tool results or thinking). "
    f"{params.described('context_management')}",
    parse=parse_context_management,
    fragment=CONTEXT_MANAGEMENT_SCHEMA,
)
# The same conversation and tools, for a count of its tokens.
COUNT_FIELDS = (
    MODEL,
    MESSAGES,
    SYSTEM,
    TOOLS,
    TOOL_CHOICE,
    THINKING,
    OUTPUT_CONFIG,
    CONTEXT_MANAGEMENT,
)
MESSAGES_FIELDS = (
    MODEL,
    MESSAGES,
    Field(
        "max_tokens",
        "integer",
        "The longest answer, in tokens (required, as by Anthropic). Past "
        f"{MAX_TOKENS_LIMIT} the gateway asks for {MAX_TOKENS_LIMIT}.",
        required=True,
        nullable=False,
        minimum=1,
        maximum=MAX_TOKENS_TAKEN,
    ),
    SYSTEM,
    Field("temperature", "number", "Sampling temperature, 0 to 1.", minimum=0, maximum=1),
    Field("top_p", "number", "Nucleus sampling.", minimum=0, maximum=1),
    Field(
        "top_k",
        "integer",
        f"Sampling from the top K tokens only. {params.described('top_k')}",
        minimum=0,
    ),
    THINKING,
    OUTPUT_CONFIG,
    CONTEXT_MANAGEMENT,
    Field(
        "stop_sequences",
        "any",
        "Where the answer stops.",
        parse=parse_stop_sequences,
        fragment=STOP_SEQUENCES_SCHEMA,
    ),
    Field("stream", "boolean", "Stream the answer as Anthropic's typed events.", default=False),
    TOOLS,
    TOOL_CHOICE,
    Field(
        "metadata",
        "any",
        "user_id: the end user (the weighted strategy keeps one user on one provider).",
        parse=parse_metadata,
        fragment=METADATA_SCHEMA,
    ),
    Field(
        "service_tier",
        "string",
        "Taken and left: the gateway's routing decides who answers.",
        enum=("auto", "standard_only"),
    ),
    Field(
        "output_format",
        "any",
        'The answer\'s JSON ({"type": "json_schema", "schema": {...}}), as output_config\'s '
        "format says it.",
        parse=parse_output_format,
        fragment=OUTPUT_FORMAT_SCHEMA,
    ),
    *(
        Field(
            name,
            "any",
            f"Anthropic's own setting. {params.described(name)}",
            parse=lambda value, body: value,
            fragment={},
        )
        for name in params.ANTHROPIC_SETTINGS
    ),
    *ROUTING_FIELDS,
)
MESSAGES_BODY = BodyTable(MESSAGES_FIELDS, refused=UNSUPPORTED_FIELDS, unknown=ANTHROPIC_UNKNOWN)
COUNT_BODY = BodyTable(COUNT_FIELDS, refused=UNSUPPORTED_FIELDS, unknown=ANTHROPIC_UNKNOWN)


@dataclass(frozen=True, slots=True)
class MessagesBody:
    """The request to route (`completion`), and what the answer gives back."""

    model: str
    completion: CompletionRequest
    stream: bool = False
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


def _completion(values: dict[str, Any], *, user: str = "", **sampling: Any) -> CompletionRequest:
    prompt, history, turns = values["messages"]
    tool_choice, parallel = values["tool_choice"]
    tools, anthropics = values["tools"]
    effort, output_config, output = values.get("output_config") or ("", None, None)
    carried = {
        "anthropic_tools": anthropics or None,
        "top_k": values.get("top_k"),
        "output_config": output_config,
        "context_management": values.get("context_management"),
        **{name: values.get(name) for name in params.ANTHROPIC_SETTINGS},
    }
    options = (
        *([("user", user)] if user else []),
        *([("parallel_tool_calls", False)] if tools and not parallel else []),
        *((name, value) for name, value in carried.items() if value is not None),
    )
    thinking = values.get("thinking")
    if effort and thinking is not None and thinking.on:
        thinking = replace(thinking, effort=effort)
    return CompletionRequest(
        prompt=prompt,
        system_prompt=values["system"],
        history=history,
        turns=turns,
        tools=tools,
        tool_choice=tool_choice,
        options=options,
        thinking=thinking,
        output=output or values.get("output_format"),
        **sampling,
    )


def parse_messages_body(raw: bytes) -> MessagesBody | ApiError:
    """A Messages request, validated with Anthropic's own rules where it has them."""
    values = MESSAGES_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    user = values["user"] or values["metadata"]
    completion = _completion(
        values,
        user=user,
        max_tokens=min(values["max_tokens"], MAX_TOKENS_LIMIT),
        temperature=values["temperature"],
        top_p=values["top_p"],
        stop=values["stop_sequences"],
    )
    routing = {field.name: values[field.name] for field in ROUTING_FIELDS}
    return MessagesBody(
        model=values["model"],
        completion=completion,
        stream=values["stream"],
        **{**routing, "user": user},
    )


def parse_count_body(raw: bytes) -> MessagesBody | ApiError:
    """A token count's request: the conversation, its system prompt and tools."""
    values = COUNT_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    return MessagesBody(model=values["model"], completion=_completion(values))


def messages_body_schema() -> JsonSchema:
    return MESSAGES_BODY.schema(
        "An Anthropic Messages request; an unknown field is refused as Anthropic refuses it. "
        "The gateway's own priority, task, allow_cloud and cache may ride along."
    )


def count_body_schema() -> JsonSchema:
    return COUNT_BODY.schema(
        "The conversation, its system prompt and tools, whose input tokens to count."
    )
