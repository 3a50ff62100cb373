"""The tools of an Anthropic Messages request: client tools (name, description,
input_schema) and `tool_choice`, each with the JSON Schema that says the same, read into the
same `Tool`s and tool choice a Chat Completions request becomes; Anthropic's own tools (a
versioned type: web search, bash, the text editor, code execution …) kept as they came, for an
Anthropic provider only."""

from __future__ import annotations

import re
from typing import Any

from edge.api.fields import JsonSchema, invalid
from edge.api.json_body import ApiError
from edge.api.openai.chat_tools import MAX_TOOLS, NAME, NAME_RULE
from gateway.adapters.messages import Tool

NAME_PATTERN = f"^{NAME.pattern}$"


def _unsupported(message: str, at: str) -> ApiError:
    return ApiError(400, "unsupported_parameter", message, at)


# Anthropic's own tools, by a versioned type (web_search_20250305, bash_20250124,
# text_editor_20250728, code_execution_20250825 …): carried to an Anthropic provider as they
# are, left out elsewhere (no other kind of provider knows them) and named as dropped.
ANTHROPIC_TOOL = re.compile(r"[a-z][a-z0-9_]*_\d{8}")
TOOLS_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_TOOLS,
    "items": {
        "anyOf": [
            {
                "type": "object",
                "required": ["name", "input_schema"],
                "properties": {
                    "type": {"const": "custom"},
                    "name": {"type": "string", "pattern": NAME_PATTERN},
                    "description": {"type": ["string", "null"]},
                    "input_schema": {"type": "object"},
                },
            },
            {
                "type": "object",
                "required": ["type", "name"],
                "properties": {
                    "type": {"type": "string", "pattern": f"^{ANTHROPIC_TOOL.pattern}$"},
                    "name": {"type": "string", "minLength": 1},
                },
            },
        ]
    },
}
TOOL_CHOICE_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"enum": ["auto", "any", "none", "tool"]},
                "name": {"type": "string"},
                "disable_parallel_tool_use": {"type": "boolean"},
            },
        },
    ]
}
# Anthropic's choices in the chat endpoint's words.
CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def parse_tools(value: Any, body: dict[str, Any]) -> Any:
    """(the client tools offered, as `Tool`s; Anthropic's own tools, as they came)."""
    if value is None or value == []:
        return (), ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        return invalid("tools", f"'tools' must be a list of at most {MAX_TOOLS} tools.")
    tools: list[Tool] = []
    anthropics: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        at = f"tools.{index}"
        if not isinstance(item, dict):
            return invalid(at, "Each tool is an object.")
        kind = item.get("type", "custom")
        if isinstance(kind, str) and ANTHROPIC_TOOL.fullmatch(kind):
            if not isinstance(item.get("name"), str) or not item["name"]:
                return invalid(f"{at}.name", f"A {kind} tool needs its 'name'.")
            anthropics.append(item)
            continue
        if kind != "custom":
            return _unsupported(
                f"Tools are client tools (name, input_schema) or Anthropic's own by a "
                f"versioned type, not '{kind}'.",
                f"{at}.type",
            )
        name, description, schema = (
            item.get("name"),
            item.get("description"),
            item.get("input_schema"),
        )
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return invalid(f"{at}.name", f"A tool's name is {NAME_RULE}.")
        if any(tool.name == name for tool in tools):
            return invalid(f"{at}.name", f"Two tools are named '{name}'.")
        if description is not None and not isinstance(description, str):
            return invalid(f"{at}.description", "A description must be a string.")
        if not isinstance(schema, dict):
            return invalid(f"{at}.input_schema", "'input_schema' must be a JSON Schema object.")
        tools.append(Tool(name, description or "", schema))
    return tuple(tools), tuple(anthropics)


def parse_tool_choice(value: Any, body: dict[str, Any]) -> Any:
    """("" when not sent, none / auto / required, or the name of the one tool to call;
    whether the model may call several tools at once)."""
    if value is None:
        return "", True
    tools: list[Any] = body["tools"] if isinstance(body.get("tools"), list) else []
    offered = {tool.get("name") for tool in tools if isinstance(tool, dict)}
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(value, dict) or kind not in (*CHOICES, "tool"):
        return invalid("tool_choice", "tool_choice's type is auto, any, none or tool.")
    parallel = value.get("disable_parallel_tool_use", False)
    if not isinstance(parallel, bool):
        return invalid("tool_choice.disable_parallel_tool_use", "It must be true or false.")
    if not offered:
        return invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given.")
    if kind != "tool":
        return CHOICES[kind], not parallel
    name = value.get("name")
    if not isinstance(name, str) or name not in offered:
        return invalid(
            "tool_choice.name", f"'tool_choice' names '{name}', which is not in 'tools'."
        )
    return name, not parallel
