"""The parts of a Chat Completions request that carry tools and structured output: `tools`,
`tool_choice`, `response_format`, and the conversation's tool calls and tool results, each
checked with OpenAI's own rules (and refused in OpenAI's words where they break them).

A conversation that uses tools, or a request that offers any, becomes `turns`; a plain one
stays the (system, question, history) the rest of the gateway has always read.
"""

from __future__ import annotations

import re
from typing import Any

from edge.api.fields import JsonSchema, invalid
from edge.api.json_body import ApiError
from gateway.adapters.messages import OutputFormat, Tool, ToolCall, Turn

MAX_TOOLS = 128
NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
NAME_RULE = "a-z, A-Z, 0-9, underscores and dashes, at most 64 characters"
CHOICES = ("none", "auto", "required")

FUNCTION: JsonSchema = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": f"^{NAME.pattern}$"},
        "description": {"type": "string"},
        "parameters": {"type": ["object", "null"]},
        "strict": {"type": ["boolean", "null"]},
    },
}
TOOLS_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_TOOLS,
    "items": {
        "type": "object",
        "required": ["type", "function"],
        "properties": {"type": {"const": "function"}, "function": FUNCTION},
    },
}
TOOL_CHOICE_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "null"},
        {"enum": list(CHOICES)},
        {
            "type": "object",
            "required": ["type", "function"],
            "properties": {
                "type": {"const": "function"},
                "function": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}},
                },
            },
        },
    ]
}
RESPONSE_FORMAT_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"enum": ["text", "json_object"]}},
        },
        {
            "type": "object",
            "required": ["type", "json_schema"],
            "properties": {
                "type": {"const": "json_schema"},
                "json_schema": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": f"^{NAME.pattern}$"},
                        "description": {"type": "string"},
                        "schema": {"type": ["object", "null"]},
                        "strict": {"type": ["boolean", "null"]},
                    },
                },
            },
        },
    ]
}


def parse_tools(value: Any, body: dict[str, Any]) -> Any:
    """The tools offered, as `Tool`s (() when none)."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        return invalid("tools", "'tools' must be a list of tools.")
    if len(value) > MAX_TOOLS:
        return invalid("tools", f"'tools' may hold at most {MAX_TOOLS} tools.")
    tools: list[Tool] = []
    for index, item in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(item, dict):
            return invalid(where, "Each tool must be an object.")
        if item.get("type") != "function":
            return ApiError(
                400,
                "unsupported_parameter",
                "Only function tools are supported ('type': 'function').",
                f"{where}.type",
            )
        function = item.get("function")
        if not isinstance(function, dict):
            return invalid(f"{where}.function", f"'{where}.function' must be an object.")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return invalid(f"{where}.function.name", f"A function's name is {NAME_RULE}.")
        if any(tool.name == name for tool in tools):
            return invalid(f"{where}.function.name", f"Two tools are named '{name}'.")
        description = function.get("description", "")
        parameters = function.get("parameters")
        strict = function.get("strict")
        if not isinstance(description, str):
            return invalid(f"{where}.function.description", "A description must be a string.")
        if parameters is not None and not isinstance(parameters, dict):
            return invalid(f"{where}.function.parameters", "'parameters' must be a JSON Schema.")
        if strict is not None and not isinstance(strict, bool):
            return invalid(f"{where}.function.strict", "'strict' must be true or false.")
        tools.append(Tool(name, description, parameters, strict))
    return tuple(tools)


def parse_tool_choice(value: Any, body: dict[str, Any]) -> Any:
    """ "" (not sent), none / auto / required, or the name of the one tool to call."""
    if value is None:
        return ""
    names = _tool_names(body.get("tools"))
    if not names:
        return invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given.")
    if value in CHOICES:
        return value
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        return invalid(
            "tool_choice",
            "'tool_choice' must be none, auto, required or "
            '{"type": "function", "function": {"name": ...}}.',
        )
    if name not in names:
        return invalid("tool_choice", f"'tool_choice' names '{name}', which is not in 'tools'.")
    return name


def _tool_names(tools: Any) -> set[str]:
    if not isinstance(tools, list):
        return set()
    return {
        item["function"]["name"]
        for item in tools
        if isinstance(item, dict)
        and isinstance(item.get("function"), dict)
        and isinstance(item["function"].get("name"), str)
    }


def parse_response_format(value: Any, body: dict[str, Any]) -> Any:
    """None for text, or the `OutputFormat` asked for."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind != "json_schema":
        return invalid(
            "response_format", "'response_format.type' must be text, json_object or json_schema."
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        return invalid("response_format.json_schema", "'json_schema' must be an object.")
    name, schema = spec.get("name"), spec.get("schema")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return invalid("response_format.json_schema.name", f"The format's name is {NAME_RULE}.")
    if schema is not None and not isinstance(schema, dict):
        return invalid("response_format.json_schema.schema", "'schema' must be a JSON Schema.")
    strict, description = spec.get("strict"), spec.get("description", "")
    if strict is not None and not isinstance(strict, bool):
        return invalid("response_format.json_schema.strict", "'strict' must be true or false.")
    if not isinstance(description, str):
        return invalid("response_format.json_schema.description", "Must be a string.")
    return OutputFormat("json_schema", name, schema, strict, description)


def tool_calls_of(raw: Any, where: str) -> tuple[ToolCall, ...] | ApiError:
    """An assistant message's `tool_calls`, checked as OpenAI checks them."""
    if raw is None or raw == []:
        return ()
    if not isinstance(raw, list):
        return invalid(where, f"'{where}' must be a list of tool calls.")
    calls = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            return invalid(at, "Each tool call must be a function call object.")
        if not isinstance(item.get("id"), str) or not item["id"]:
            return invalid(f"{at}.id", "A tool call needs its 'id'.")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return invalid(f"{at}.function", "A tool call needs a function with a 'name'.")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            return invalid(f"{at}.function.arguments", "'arguments' must be a JSON string.")
        calls.append(ToolCall(item["id"], function["name"], arguments))
    return tuple(calls)


def tool_turn(message: dict[str, Any], index: int, text: str, calls: dict[str, str]) -> Any:
    """A `tool` message as a Turn: it must answer a call of an earlier assistant message."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        return invalid(f"messages[{index}].tool_call_id", "A tool message needs 'tool_call_id'.")
    if call_id not in calls:
        return invalid(
            f"messages[{index}].tool_call_id",
            "A message with role 'tool' must answer a tool call of an earlier assistant "
            f"message; none has the id '{call_id}'.",
        )
    return Turn("tool", text, tool_call_id=call_id, name=calls[call_id])
