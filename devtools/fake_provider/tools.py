"""The fake provider's reading of tools, tool choice, tool results and structured output in a
chat request: what to answer instead of the configured text, or the 400 a real provider answers.

The answer is deterministic. A conversation that ends with a tool's result is answered with the
text "The tool said: <result>". Otherwise, with tools and a tool choice other than "none", it is
ONE call to the tool a forcing choice names, else to the config's `tool_name` when offered, else
to the first tool (`choose`), whose arguments are the config's `tool_arguments` when set, else a
minimal instance of the tool's schema. Otherwise a structured-output request (OpenAI's
`response_format`, Ollama's `format`) is answered with JSON text: {"answer": <the configured
text>} for plain JSON mode, a minimal instance for a schema. A request's images, `described`
(`images.describe`), take the place of the tool result's echo and of the configured text.

Ollama's `format` holds the answer to JSON as the real server's grammar does, after a tool's
result too when no tools are offered; a schema there gets `tool_arguments` when they have its
shape (what a model fills a tool's schema with, asked for the call through `format`).

Validation follows the real APIs: OpenAI and Anthropic refuse malformed tools, a tool choice
naming an unknown tool and a tool result answering no earlier tool call; Ollama, lenient like
the real server, refuses only a malformed shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devtools.fake_provider import dialects
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, OPENAI, Reply
from devtools.fake_provider.schema_instance import instance

TOOL_RESULT_PREFIX = "The tool said: "


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The one tool call the fake answers with."""

    name: str
    arguments: dict[str, Any]


# What `plan` returns: a tool call, a text to answer instead of the configured one, the 400, or
# None for the ordinary answer.
Plan = ToolCall | str | Reply | None


def plan(
    dialect: str, request: dict[str, Any], config: FakeConfig, *, described: str | None = None
) -> Plan:
    """The answer to a chat request; `described`: its images' description, when answered."""
    if dialect == OLLAMA:
        return _ollama(request, config, described)
    if dialect == ANTHROPIC:
        return _anthropic(request, config, described)
    return _openai(request, config, described)


def choose(names: list[str], config: FakeConfig, forced: str | None = None) -> str:
    """The tool the one call goes to: the one a tool choice forces, else `tool_name` when it is
    offered, else the first."""
    if forced:
        return forced
    return config.tool_name if config.tool_name in names else names[0]


def _bad(dialect: str, message: str, param: str | None = None) -> Reply:
    return dialects.error(dialect, "bad_request", message=message, param=param)


def _arguments(config: FakeConfig, schema: Any) -> dict[str, Any]:
    if config.tool_arguments is not None:
        return dict(config.tool_arguments)
    value = instance(schema) if isinstance(schema, dict) else {}
    return value if isinstance(value, dict) else {}


def _text_of(content: Any) -> str:
    """A tool result's content as text: a string, or its text parts joined by spaces."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return " ".join(texts)
    return "" if content is None else json.dumps(content)


def _told(results: list[str]) -> str:
    return TOOL_RESULT_PREFIX + "\n".join(results)


def _trailing_tool_messages(messages: list[Any]) -> list[dict[str, Any]]:
    trailing: list[dict[str, Any]] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        trailing.insert(0, message)
    return trailing


def json_mode_text(config: FakeConfig) -> str:
    return json.dumps({"answer": config.full_answer}, ensure_ascii=False)


def schema_text(schema: Any) -> str:
    return json.dumps(instance(schema), ensure_ascii=False)


# OpenAI ------------------------------------------------------------------------------------


def _openai(request: dict[str, Any], config: FakeConfig, described: str | None) -> Plan:
    tools = request.get("tools")
    choice = request.get("tool_choice")
    names: list[str] = []
    schemas: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            return _bad(OPENAI, "Invalid type for 'tools': expected an array.", "tools")
        for index, tool in enumerate(tools):
            where = f"tools[{index}]"
            if not isinstance(tool, dict):
                return _bad(OPENAI, f"Invalid type for '{where}': expected an object.", where)
            if tool.get("type") != "function":
                return _bad(
                    OPENAI,
                    f"Invalid value: '{tool.get('type')}'. Supported values are: 'function' "
                    "and 'custom'.",
                    f"{where}.type",
                )
            function = tool.get("function")
            if not isinstance(function, dict):
                return _bad(
                    OPENAI, f"Missing required parameter: '{where}.function'.", f"{where}.function"
                )
            name = function.get("name")
            if not isinstance(name, str) or not name:
                param = f"{where}.function.name"
                return _bad(OPENAI, f"Missing required parameter: '{param}'.", param)
            names.append(name)
            schemas.setdefault(name, function.get("parameters"))
    wanted = _openai_choice(choice, names, config)
    if isinstance(wanted, Reply):
        return wanted
    structured = _openai_format(request.get("response_format"), config)
    if isinstance(structured, Reply):
        return structured
    messages = request["messages"]
    bad = _openai_tool_messages(messages)
    if bad is not None:
        return bad
    trailing = _trailing_tool_messages(messages)
    if trailing:
        return described or _told([_text_of(message.get("content")) for message in trailing])
    if names and wanted != "":
        name = choose(names, config, wanted)
        return ToolCall(name, _arguments(config, schemas.get(name)))
    return described if structured is None else structured


def _openai_choice(choice: Any, names: list[str], config: FakeConfig) -> str | None | Reply:
    """The tool the choice forces, None for any tool, "" for none, or the 400."""
    if choice is None:
        return None
    if not names:
        return _bad(
            OPENAI,
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            "tool_choice",
        )
    if choice == "none":
        return ""
    if choice in ("auto", "required"):
        return None
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or name not in names:
            return _bad(
                OPENAI,
                f"Invalid value for 'tool_choice': no function named '{name}' was specified "
                "in the 'tools' parameter.",
                "tool_choice",
            )
        return name
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = choice.get("allowed_tools")
        listed = allowed.get("tools") if isinstance(allowed, dict) else None
        usable = []
        for tool in listed if isinstance(listed, list) else []:
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if name in names:
                usable.append(str(name))
        return choose(usable, config) if usable else None
    return _bad(
        OPENAI,
        "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or a named tool.",
        "tool_choice",
    )


def _openai_tool_messages(messages: list[Any]) -> Reply | None:
    """The 400 for a tool message answering no tool call of the assistant message before it."""
    calls: set[Any] | None = None
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            listed = message.get("tool_calls")
            calls = (
                {c.get("id") for c in listed if isinstance(c, dict)}
                if isinstance(listed, list) and listed
                else None
            )
        elif role == "tool":
            if calls is None:
                return _bad(
                    OPENAI,
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{index}].role",
                )
            call_id = message.get("tool_call_id")
            if call_id not in calls:
                return _bad(
                    OPENAI,
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    f"messages.[{index}].tool_call_id",
                )
        else:
            calls = None
    return None


def _openai_format(response_format: Any, config: FakeConfig) -> Plan:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json_mode_text(config)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            param = "response_format.json_schema"
            return _bad(OPENAI, f"Missing required parameter: '{param}'.", param)
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            param = "response_format.json_schema.name"
            return _bad(OPENAI, f"Missing required parameter: '{param}'.", param)
        return schema_text(spec.get("schema", {}))
    return _bad(
        OPENAI,
        f"Invalid value: '{kind}'. Supported values are: 'json_object', 'json_schema', and 'text'.",
        "response_format.type",
    )


# Anthropic ---------------------------------------------------------------------------------


def _anthropic(request: dict[str, Any], config: FakeConfig, described: str | None) -> Plan:
    tools = request.get("tools")
    names: list[str] = []
    schemas: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            return _bad(ANTHROPIC, "tools: Input should be a valid list", "tools")
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict):
                return _bad(ANTHROPIC, f"tools.{index}: Input should be a valid dictionary")
            if tool.get("type") not in (None, "custom"):
                continue  # a server tool (web search, code execution...): no input_schema
            for field in ("name", "input_schema"):
                if field not in tool:
                    return _bad(ANTHROPIC, f"tools.{index}.custom.{field}: Field required")
            names.append(str(tool["name"]))
            schemas.setdefault(str(tool["name"]), tool["input_schema"])
    choice = request.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    wanted: str | None = None
    if kind == "tool":
        wanted = choice.get("name") if isinstance(choice, dict) else None
        if wanted not in names:
            return _bad(ANTHROPIC, f"tool_choice.name: Tool '{wanted}' not found in 'tools'")
    messages = request["messages"]
    bad = _anthropic_tool_results(messages)
    if bad is not None:
        return bad
    results = _anthropic_trailing_results(messages)
    if results:
        return described or _told(results)
    if names and kind != "none":
        name = choose(names, config, wanted)
        return ToolCall(name, _arguments(config, schemas.get(name)))
    return described


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return (
        [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []
    )


def _anthropic_tool_results(messages: list[Any]) -> Reply | None:
    """The 400 for a tool_result whose tool_use_id has no tool_use in the message before it."""
    for index, message in enumerate(messages):
        results = [b for b in _blocks(message) if b.get("type") == "tool_result"]
        if not results:
            continue
        previous = messages[index - 1] if index else None
        uses = set()
        if isinstance(previous, dict) and previous.get("role") == "assistant":
            uses = {b.get("id") for b in _blocks(previous) if b.get("type") == "tool_use"}
        unknown = [str(b.get("tool_use_id")) for b in results if b.get("tool_use_id") not in uses]
        if unknown:
            return _bad(
                ANTHROPIC,
                f"messages.{index}.content.0: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {', '.join(unknown)}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message.",
            )
    return None


def _anthropic_trailing_results(messages: list[Any]) -> list[str]:
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "user":
        return []
    return [_text_of(b.get("content")) for b in _blocks(last) if b.get("type") == "tool_result"]


# Ollama ------------------------------------------------------------------------------------


def _ollama(request: dict[str, Any], config: FakeConfig, described: str | None) -> Plan:
    tools = request.get("tools")
    names: list[str] = []
    schemas: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            return _bad(
                OLLAMA, "json: cannot unmarshal tools into Go struct field of type []api.Tool"
            )
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict):
                return _bad(OLLAMA, "json: cannot unmarshal tool into Go value of type api.Tool")
            name = function.get("name")
            if isinstance(name, str) and name:
                names.append(name)
                schemas.setdefault(name, function.get("parameters"))
    held = ollama_format(request.get("format"), config)
    trailing = _trailing_tool_messages(request["messages"])
    if trailing and (held is None or names):  # else format holds the answer to a result too
        return described or _told([_text_of(message.get("content")) for message in trailing])
    if names:
        name = choose(names, config)
        return ToolCall(name, _arguments(config, schemas.get(name)))
    return described if held is None else held


def ollama_format(form: Any, config: FakeConfig) -> Plan:
    """Ollama's `format`: "json" or a JSON schema (also read by /api/generate)."""
    if form is None or form == "":
        return None
    if form == "json":
        return json_mode_text(config)
    if isinstance(form, dict):
        if _has_shape(config.tool_arguments, form):  # a call's arguments, held by format
            return json.dumps(config.tool_arguments, ensure_ascii=False)
        return schema_text(form)
    return _bad(OLLAMA, f'invalid format: "{form}" is not "json" or a valid JSON schema')


def _has_shape(value: dict[str, Any] | None, schema: dict[str, Any]) -> bool:
    """Whether `value` (None: none) has the shape of the object `schema`: its required keys,
    and no others where it forbids more."""
    listed = schema.get("properties") if schema.get("additionalProperties") is False else None
    allowed = listed.keys() if isinstance(listed, dict) else (value or {}).keys()
    return value is not None and set(schema.get("required") or ()) <= value.keys() <= allowed
