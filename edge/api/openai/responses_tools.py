"""The tools of a Responses API request: function tools (a `namespace`'s flattened into them),
OpenAI's built-in tools (taken, run by no provider here, and named as dropped), and
`tool_choice`, each with the JSON Schema that says the same."""

from __future__ import annotations

from typing import Any

from edge.api.fields import JsonSchema, invalid
from edge.api.json_body import ApiError
from edge.api.openai.chat_tools import CHOICES, MAX_TOOLS, NAME, NAME_RULE
from gateway.adapters.messages import Tool

NAME_PATTERN = f"^{NAME.pattern}$"
# A custom tool's one parameter: its free-text input, as the function a chat provider calls.
FREEFORM_INPUT = "input"
# Built-in tools OpenAI runs on its side: taken, and left out of every provider's request (no
# provider here runs them), named in the answer's X-Failover-Dropped header.
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
    }
)
# Namespaces nest function tools one level deep; past this many in all, a request is refused.
MAX_NESTED_TOOLS = 512

FUNCTION_TOOL: JsonSchema = {
    "type": "object",
    "required": ["type", "name"],
    "properties": {
        "type": {"const": "function"},
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "description": {"type": ["string", "null"]},
        "parameters": {"type": ["object", "null"]},
        "strict": {"type": ["boolean", "null"]},
    },
}
TOOLS_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_TOOLS,
    "items": {
        "anyOf": [
            FUNCTION_TOOL,
            {
                "type": "object",
                "required": ["type", "name", "tools"],
                "properties": {
                    "type": {"const": "namespace"},
                    "name": {"type": "string"},
                    "description": {"type": ["string", "null"]},
                    "tools": {"type": "array", "items": FUNCTION_TOOL},
                },
            },
            {
                "type": "object",
                "required": ["type", "name"],
                "properties": {
                    "type": {"const": "custom"},
                    "name": {"type": "string", "pattern": NAME_PATTERN},
                    "description": {"type": ["string", "null"]},
                    "format": {"type": ["object", "null"]},
                },
            },
            {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": sorted(HOSTED_TOOLS)}},
            },
        ]
    },
}
TOOL_CHOICE_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "null"},
        {"enum": list(CHOICES)},
        {
            "type": "object",
            "required": ["type", "name"],
            "properties": {"type": {"const": "function"}, "name": {"type": "string"}},
        },
    ]
}


def parse_tools(value: Any, body: dict[str, Any]) -> Any:
    """(the function tools offered, as `Tool`s, a namespace's flattened into them and a custom
    tool as a function of its free-text input; the built-in tools offered, which no provider
    here runs; the custom tools' names, whose calls are answered as custom tool calls)."""
    if value is None or value == []:
        return (), (), frozenset()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        return invalid("tools", f"'tools' must be a list of at most {MAX_TOOLS} tools.")
    tools: list[Tool] = []
    hosted: list[dict[str, Any]] = []
    custom: set[str] = set()
    for index, item in enumerate(value):
        at = f"tools[{index}]"
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and kind in HOSTED_TOOLS:
            hosted.append(item)
            continue
        if kind == "custom":
            assert isinstance(item, dict)
            problem = _custom_tool(item, at, tools)
            if problem is not None:
                return problem
            custom.add(tools[-1].name)
            continue
        if kind == "namespace":
            if not isinstance(item.get("name"), str):
                return invalid(f"{at}.name", "A namespace's name must be a string.")
            if not isinstance(item.get("description", ""), str | None):
                return invalid(f"{at}.description", "A description must be a string.")
            inner = item.get("tools")
            if not isinstance(inner, list):
                return invalid(f"{at}.tools", "A namespace holds a list of function tools.")
            for place, nested in enumerate(inner):
                problem = _function_tool(nested, f"{at}.tools[{place}]", tools)
                if problem is not None:
                    return problem
            continue
        problem = _function_tool(item, at, tools)
        if problem is not None:
            return problem
    if len(tools) > MAX_NESTED_TOOLS:
        return invalid("tools", f"At most {MAX_NESTED_TOOLS} functions in all.")
    return tuple(tools), tuple(hosted), frozenset(custom)


def _custom_tool(item: dict[str, Any], at: str, tools: list[Tool]) -> ApiError | None:
    """A custom (free-form) tool appended to `tools` as a function of one string, `input`: its
    grammar, when it has one, told in the parameter's description (a chat provider holds no
    model to a grammar)."""
    name, description, form = item.get("name"), item.get("description"), item.get("format")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return invalid(f"{at}.name", f"A tool's name is {NAME_RULE}.")
    if any(tool.name == name for tool in tools):
        return invalid(f"{at}.name", f"Two tools are named '{name}'.")
    if description is not None and not isinstance(description, str):
        return invalid(f"{at}.description", "A description must be a string.")
    what = "The tool's whole input, as free text."
    kind = form.get("type") if isinstance(form, dict) else None
    if form is not None and kind not in ("text", "grammar"):
        return invalid(f"{at}.format", "A custom tool's format is text or grammar.")
    if kind == "grammar":
        assert isinstance(form, dict)
        syntax, definition = form.get("syntax"), form.get("definition")
        if syntax not in ("lark", "regex") or not isinstance(definition, str):
            return invalid(f"{at}.format", "A grammar is lark or regex, with its definition.")
        what = f"The tool's whole input, as text in this {syntax} grammar:\n{definition}"
    parameters = {
        "type": "object",
        "properties": {FREEFORM_INPUT: {"type": "string", "description": what}},
        "required": [FREEFORM_INPUT],
        "additionalProperties": False,
    }
    tools.append(Tool(name, description or "", parameters))
    return None


def _function_tool(item: Any, at: str, tools: list[Tool]) -> ApiError | None:
    """One function tool appended to `tools`, or what is wrong with it."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind != "function":
        return ApiError(
            400,
            "unsupported_parameter",
            f"Tools are functions, namespaces of functions or OpenAI's built-in tools, "
            f"not '{kind}'.",
            f"{at}.type",
        )
    name, description = item.get("name"), item.get("description")
    parameters, strict = item.get("parameters"), item.get("strict")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return invalid(f"{at}.name", f"A function's name is {NAME_RULE}.")
    if any(tool.name == name for tool in tools):
        return invalid(f"{at}.name", f"Two tools are named '{name}'.")
    if description is not None and not isinstance(description, str):
        return invalid(f"{at}.description", "A description must be a string.")
    if parameters is not None and not isinstance(parameters, dict):
        return invalid(f"{at}.parameters", "'parameters' must be a JSON Schema.")
    if strict is not None and not isinstance(strict, bool):
        return invalid(f"{at}.strict", "'strict' must be true or false.")
    tools.append(Tool(name, description or "", parameters, strict))
    return None


def parse_tool_choice(value: Any, body: dict[str, Any]) -> Any:
    """ "" (not sent), none / auto / required, or the name of the one tool to call."""
    if value is None:
        return ""
    tools: list[Any] = body["tools"] if isinstance(body.get("tools"), list) else []
    offered = {tool.get("name") for tool in tools if isinstance(tool, dict)}
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            inner = tool.get("tools")
            if isinstance(inner, list):
                offered |= {nested.get("name") for nested in inner if isinstance(nested, dict)}
    if not offered:
        return invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given.")
    if value in CHOICES:
        return value
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        return invalid(
            "tool_choice",
            'tool_choice is none, auto, required or {"type": "function", "name": ...}.',
        )
    if name not in offered:
        return invalid("tool_choice", f"'tool_choice' names '{name}', which is not in 'tools'.")
    return name
