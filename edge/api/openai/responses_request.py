"""The body of `POST /v1/responses`: the text subset of OpenAI's Responses API, read into the
same `CompletionRequest` a Chat Completions request becomes, as a table of fields
(`edge/api/fields.py`) that is also the body's schema in `/api/openapi.json`.

`input` is a string or a list of items: messages (text, or input_text / output_text parts),
function calls and their outputs. Tools are flat function tools; `text.format` is the
structured output. The gateway stores nothing, so what needs a stored response
(`previous_response_id`, `conversation`, `background`, item references) is refused by name,
and so is what it can't serve (built-in tools, images and files, reasoning settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.api.fields import BodyTable, Field, JsonSchema, invalid
from edge.api.json_body import ApiError
from edge.api.openai.chat_messages import ROLES
from edge.api.openai.chat_request import CHAT_FIELDS, option_field, unsupported
from edge.api.openai.responses_input import (
    INPUT_SCHEMA,
    METADATA_SCHEMA,
    TEXT_SCHEMA,
    parse_input,
    parse_metadata,
    parse_text,
)
from edge.api.openai.responses_reasoning import REASONING_SCHEMA, parse_reasoning
from edge.api.openai.responses_tools import (
    TOOL_CHOICE_SCHEMA,
    TOOLS_SCHEMA,
    parse_tool_choice,
    parse_tools,
)
from edge.api.validation import MAX_TOKENS_LIMIT, ROUTING_FIELDS, TEMPERATURE
from gateway.adapters.messages import CompletionRequest

# Checked first, by name, so a request that uses one hears why it can't be served.
STATELESS = "this gateway stores no responses or conversations."
UNSUPPORTED_FIELDS = (
    unsupported("background", f"background responses: {STATELESS}"),
    unsupported("context_management", "server-side compaction is not supported."),
    unsupported("conversation", f"'conversation': {STATELESS}"),
    unsupported("moderation", "moderation is not supported by this gateway."),
    unsupported("previous_response_id", f"'previous_response_id': {STATELESS}"),
    unsupported("prompt", "stored prompt templates are not supported."),
    unsupported("top_logprobs", "log probabilities are not supported by this gateway."),
    Field(
        "truncation",
        "any",
        'Only "disabled" (the default): the input is sent whole, never cut.',
        parse=lambda value, body: (
            None
            if value in (None, "disabled")
            else ApiError(
                400,
                "unsupported_parameter",
                "truncation is not supported: the input is sent whole.",
                "truncation",
            )
        ),
        fragment={"enum": ["disabled", None]},
    ),
)
# What `include` may name (OpenAI's list); each is taken, and the gateway has none of them to
# add: a reasoning item's encrypted content is OpenAI's own, which no chat provider gives.
INCLUDABLE = (
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "web_search_call.action.sources",
    "web_search_call.results",
)
_CHAT = {field.name: field for field in CHAT_FIELDS}
RESPONSES_FIELDS = (
    _CHAT["model"],
    Field(
        "input",
        "any",
        "A string (the user's question), or a list of items: messages (roles "
        f"{', '.join(ROLES)}; text or input_text / output_text parts), function_call items and "
        "the function_call_output items that answer them. The last item after any system ones "
        "is the user's or a tool's output; as long as the body limit allows and some "
        "provider's context window takes.",
        parse=parse_input,
        fragment=INPUT_SCHEMA,
        examples=("What are your opening hours?",),
    ),
    Field("instructions", "string", "The system prompt, before any system messages of input."),
    Field(
        "max_output_tokens",
        "integer",
        "The longest answer, in tokens; the provider's own limit when not sent.",
        minimum=16,
        maximum=MAX_TOKENS_LIMIT,
    ),
    TEMPERATURE,
    _CHAT["top_p"],
    Field(
        "tools",
        "any",
        "Function tools (type function: name, description, parameters, strict); built-in "
        "tools are refused. A provider whose settings say it can't call tools is passed over.",
        parse=parse_tools,
        fragment=TOOLS_SCHEMA,
    ),
    Field(
        "tool_choice",
        "any",
        'none, auto, required, or {"type": "function", "name": ...}; with tools only.',
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
    Field("parallel_tool_calls", "boolean", "Whether several tools may be called at once."),
    Field(
        "text",
        "any",
        "format: text, json_object, or json_schema (name, schema, strict), as the chat "
        "endpoint's response_format.",
        parse=parse_text,
        fragment=TEXT_SCHEMA,
    ),
    Field("stream", "boolean", "Stream the answer as typed server-sent events.", default=False),
    Field(
        "metadata",
        "any",
        "Up to 16 labels, given back in the response.",
        parse=parse_metadata,
        fragment=METADATA_SCHEMA,
    ),
    Field("store", "boolean", "Taken, but nothing is stored: a response can't be fetched again."),
    Field(
        "reasoning",
        "any",
        '{"effort": "none" | "minimal" | "low" | "medium" | "high" | "xhigh", "summary": '
        '"auto" | "concise" | "detailed"}: the thinking asked of each provider whose model '
        "thinks, in its own words; what it thought comes back as a reasoning item with its "
        "summary. Dropped for a provider whose model doesn't think.",
        parse=parse_reasoning,
        fragment=REASONING_SCHEMA,
    ),
    Field(
        "include",
        "any",
        "Extra output to include: each of OpenAI's values is taken; none of them is produced "
        "(reasoning.encrypted_content is OpenAI's own, and no chat provider gives it).",
        parse=lambda value, body: (
            None
            if value is None
            or (isinstance(value, list) and all(item in INCLUDABLE for item in value))
            else invalid("include", f"'include' lists some of: {', '.join(INCLUDABLE)}.")
        ),
        fragment={"type": ["array", "null"], "items": {"enum": list(INCLUDABLE)}},
    ),
    Field(
        "max_tool_calls", "integer", "Built-in tool calls at most: none are run here.", minimum=1
    ),
    Field(
        "stream_options",
        "any",
        "include_obfuscation: taken; events carry no obfuscation padding.",
        parse=lambda value, body: (
            None
            if value is None
            or (
                isinstance(value, dict)
                and set(value) <= {"include_obfuscation"}
                and isinstance(value.get("include_obfuscation", True), bool)
            )
            else invalid("stream_options", "'stream_options' takes include_obfuscation only.")
        ),
        fragment={
            "type": ["object", "null"],
            "properties": {"include_obfuscation": {"type": "boolean"}},
            "additionalProperties": False,
        },
    ),
    option_field(
        "prompt_cache_key", "string", "A key grouping requests for OpenAI's prompt cache."
    ),
    option_field("prompt_cache_retention", "string", "How long OpenAI keeps the prompt cached."),
    option_field("prompt_cache_options", "object", "OpenAI's prompt cache settings."),
    option_field("safety_identifier", "string", "The end user, for OpenAI's abuse monitoring."),
    option_field("service_tier", "string", "OpenAI's processing tier."),
    option_field("client_metadata", "object", "The client's labels of its own requests."),
    *ROUTING_FIELDS,
)
RESPONSES_BODY = BodyTable(RESPONSES_FIELDS, refused=UNSUPPORTED_FIELDS)


@dataclass(frozen=True, slots=True)
class ResponsesBody:
    """The request to route (`completion`), and what the Response object gives back."""

    model: str
    completion: CompletionRequest
    instructions: str | None = None
    stream: bool = False
    tool_choice: str = ""
    parallel_tool_calls: bool = True
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = None  # as asked, given back in the Response object
    summary: bool = False  # a reasoning item's summary is wanted
    hosted_tools: tuple[dict[str, Any], ...] = ()  # built-in tools offered: none is run
    custom_tools: frozenset[str] = frozenset()  # their calls answered as custom tool calls
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    cache: bool = True
    user: str = ""


def parse_responses(raw: bytes) -> ResponsesBody | ApiError:
    """A Responses API request, validated with OpenAI's own rules where it has them."""
    values = RESPONSES_BODY.read(raw)
    if isinstance(values, ApiError):
        return values
    system_prompt, prompt, history, turns = values["input"]
    tools, hosted, custom = values["tools"]
    parallel = values["parallel_tool_calls"]
    verbosity = values["text"][1]
    carried = {
        name: values[name]
        for name in (
            "prompt_cache_key",
            "prompt_cache_retention",
            "prompt_cache_options",
            "safety_identifier",
            "service_tier",
            "client_metadata",
        )
        if values[name] not in (None, "")
    }
    options = (
        *([("user", values["user"])] if values["user"] else []),
        *([("parallel_tool_calls", parallel)] if tools and parallel is not None else []),
        *carried.items(),
        *([("verbosity", verbosity)] if verbosity else []),
        *([("hosted_tools", tuple(tool["type"] for tool in hosted))] if hosted else []),
    )
    thinking, reasoning, summary = values["reasoning"] or (None, None, False)
    completion = CompletionRequest(
        prompt=prompt,
        system_prompt=system_prompt,
        history=history,
        max_tokens=values["max_output_tokens"],
        temperature=values["temperature"],
        top_p=values["top_p"],
        turns=turns,
        tools=tools,
        tool_choice=values["tool_choice"],
        output=values["text"][0],
        options=options,
        thinking=thinking,
    )
    return ResponsesBody(
        model=values["model"],
        completion=completion,
        instructions=values["instructions"],
        stream=values["stream"],
        tool_choice=values["tool_choice"],
        parallel_tool_calls=parallel is not False,
        metadata=values["metadata"],
        reasoning=reasoning,
        summary=summary,
        hosted_tools=hosted,
        custom_tools=custom,
        **{field.name: values[field.name] for field in ROUTING_FIELDS},
    )


def responses_body_schema() -> JsonSchema:
    return RESPONSES_BODY.schema(
        "A Responses API request, its text subset; an unknown field is refused as OpenAI "
        "refuses it. The gateway's own priority, task, allow_cloud and cache may ride along."
    )
