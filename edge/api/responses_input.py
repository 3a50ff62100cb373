"""The parts of a Responses API request the field table can't check alone: `input` (messages,
function calls and their outputs), the flat function `tools`, `tool_choice`, `text.format` and
`metadata`, each with the JSON Schema that says the same, read with OpenAI's rules into what a
Chat Completions request becomes (`edge/api/chat_messages.py`, `chat_tools.py`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from edge.api.chat_messages import (
    MAX_MESSAGES,
    ROLES,
    SYSTEM_ROLES,
)
from edge.api.chat_tools import CHOICES, MAX_TOOLS, NAME, NAME_RULE
from edge.api.fields import NOT_BLANK, JsonSchema, invalid
from edge.api.json_body import ApiError
from gateway.adapters.messages import OutputFormat, Tool, ToolCall, Turn

TEXT_TYPES = ("input_text", "output_text")
NAME_PATTERN = f"^{NAME.pattern}$"
TEXT_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"enum": list(TEXT_TYPES)}, "text": {"type": "string"}},
}
MESSAGE_ITEM: JsonSchema = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "type": {"const": "message"},
        "role": {"enum": list(ROLES)},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]},
    },
}
CALL_ID: JsonSchema = {"type": "string", "minLength": 1}
FUNCTION_CALL_ITEM: JsonSchema = {
    "type": "object",
    "required": ["type", "call_id", "name", "arguments"],
    "properties": {
        "type": {"const": "function_call"},
        "call_id": CALL_ID,
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": "string"},
    },
}
OUTPUT_ITEM: JsonSchema = {
    "type": "object",
    "required": ["type", "call_id", "output"],
    "properties": {
        "type": {"const": "function_call_output"},
        "call_id": CALL_ID,
        "output": {"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]},
    },
}
INPUT_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "string", "pattern": NOT_BLANK},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_MESSAGES,
            "items": {"anyOf": [MESSAGE_ITEM, FUNCTION_CALL_ITEM, OUTPUT_ITEM]},
        },
    ]
}
TOOLS_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_TOOLS,
    "items": {
        "type": "object",
        "required": ["type", "name"],
        "properties": {
            "type": {"const": "function"},
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "description": {"type": ["string", "null"]},
            "parameters": {"type": ["object", "null"]},
            "strict": {"type": ["boolean", "null"]},
        },
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
FORMAT_SCHEMA: JsonSchema = {
    "anyOf": [
        {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"enum": ["text", "json_object"]}},
        },
        {
            "type": "object",
            "required": ["type", "name", "schema"],
            "properties": {
                "type": {"const": "json_schema"},
                "name": {"type": "string", "pattern": NAME_PATTERN},
                "schema": {"type": "object"},
                "strict": {"type": ["boolean", "null"]},
                "description": {"type": "string"},
            },
        },
    ]
}
TEXT_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "properties": {"format": {"anyOf": [{"type": "null"}, FORMAT_SCHEMA]}},
    "additionalProperties": False,
}
MAX_METADATA = 16
METADATA_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "maxProperties": MAX_METADATA,
    "propertyNames": {"maxLength": 64},
    "additionalProperties": {"type": "string", "maxLength": 512},
}


def _text(content: Any, where: str) -> str | ApiError:
    """Text, or text parts (input_text / output_text) joined by new lines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return invalid(where, f"'{where}' must be a string or a list of text parts.")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_image", "input_file", "input_audio"):
            what = kind.removeprefix("input_")
            return ApiError(
                400,
                "unsupported_parameter",
                f"Only text input is supported: {what} inputs are not.",
                f"{where}[{index}]",
            )
        if kind not in TEXT_TYPES or not isinstance(part.get("text"), str):
            return invalid(f"{where}[{index}]", "A content part is input_text or output_text.")
        texts.append(part["text"])
    return "\n".join(texts)


def _item(item: Any, at: str, turns: list[Turn], calls: dict[str, str]) -> str | ApiError | None:
    """One input item appended to `turns` (None), or a system message's text, or the error."""
    if not isinstance(item, dict):
        return invalid(at, "Each input item must be an object.")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            return invalid(f"{at}.role", "'role' must be user, assistant, system or developer.")
        text = _text(item.get("content"), f"{at}.content")
        if isinstance(text, ApiError) or role in SYSTEM_ROLES:
            return text
        turns.append(Turn(role, text))
        return None
    call_id = item["call_id"] if isinstance(item.get("call_id"), str) else ""
    if kind in ("function_call", "function_call_output") and not call_id:
        return invalid(f"{at}.call_id", f"A {kind} item needs its 'call_id'.")
    if kind == "function_call":
        name, arguments = item.get("name"), item.get("arguments")
        if not isinstance(name, str) or not name or not isinstance(arguments, str):
            return invalid(at, "A function_call item needs a 'name' and 'arguments' (JSON text).")
        call = ToolCall(call_id, name, arguments)
        calls[call_id] = name
        if turns and turns[-1].role == "assistant":  # its text and calls: one assistant turn
            turns[-1] = replace(turns[-1], tool_calls=(*turns[-1].tool_calls, call))
        else:
            turns.append(Turn("assistant", tool_calls=(call,)))
        return None
    if kind == "function_call_output":
        if call_id not in calls:
            return invalid(
                f"{at}.call_id", f"No earlier function_call item has the call_id '{call_id}'."
            )
        text = _text(item.get("output"), f"{at}.output")
        if isinstance(text, ApiError):
            return text
        turns.append(Turn("tool", text, tool_call_id=call_id, name=calls[call_id]))
        return None
    if kind == "item_reference":
        return ApiError(
            400, "unsupported_parameter", "This gateway stores no items to refer to.", at
        )
    return ApiError(
        400,
        "unsupported_parameter",
        "Input items are messages, function_call and function_call_output items only.",
        f"{at}.type",
    )


def parse_input(value: Any, body: dict[str, Any]) -> Any:
    """(system prompt, question, the turns before it, the whole conversation as `Turn`s when
    it uses tools), as the chat endpoint reads its messages."""
    items = [{"role": "user", "content": value}] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        return invalid("input", "'input' must be a string or a non-empty list of items.")
    if len(items) > MAX_MESSAGES:
        return invalid("input", f"'input' may hold at most {MAX_MESSAGES} items.")
    instructions = body.get("instructions")
    system: list[str] = [instructions] if isinstance(instructions, str) and instructions else []
    turns: list[Turn] = []
    calls: dict[str, str] = {}  # the calls made so far: call_id → tool name
    for index, item in enumerate(items):
        found = _item(item, "input" if isinstance(value, str) else f"input[{index}]", turns, calls)
        if isinstance(found, ApiError):
            return found
        if found is not None:
            system.append(found)
    if not turns or turns[-1].role not in ("user", "tool"):
        return invalid(
            "input", "The last item (after any system ones) must be the user's, or a tool's output."
        )
    users = [turn for turn in turns if turn.role == "user"]
    prompt = users[-1].text if users else ""
    if turns[-1].role == "user" and not prompt.strip():
        return invalid("input", "The question cannot be blank.")
    if calls or body.get("tools"):
        return "\n\n".join(system), prompt, (), tuple(turns)
    return "\n\n".join(system), prompt, tuple((t.role, t.text) for t in turns[:-1]), ()


def parse_tools(value: Any, body: dict[str, Any]) -> Any:
    """The function tools offered, as `Tool`s (() when none); a built-in tool is refused."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        return invalid("tools", f"'tools' must be a list of at most {MAX_TOOLS} tools.")
    tools: list[Tool] = []
    for index, item in enumerate(value):
        at = f"tools[{index}]"
        kind = item.get("type") if isinstance(item, dict) else None
        if kind != "function":
            return ApiError(
                400,
                "unsupported_parameter",
                f"Only function tools are supported, not '{kind}': this gateway runs no "
                "built-in tools.",
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
    return tuple(tools)


def parse_tool_choice(value: Any, body: dict[str, Any]) -> Any:
    """ "" (not sent), none / auto / required, or the name of the one tool to call."""
    if value is None:
        return ""
    tools: list[Any] = body["tools"] if isinstance(body.get("tools"), list) else []
    offered = {tool.get("name") for tool in tools if isinstance(tool, dict)}
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


def parse_text(value: Any, body: dict[str, Any]) -> Any:
    """None for text, or the `OutputFormat` `text.format` asks for."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return invalid("text", "'text' must be an object.")
    if set(value) - {"format"}:
        return invalid(f"text.{min(set(value) - {'format'})}", "'text' takes only 'format'.")
    spec = value.get("format")
    kind = spec.get("type") if isinstance(spec, dict) else None
    if spec is None or kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind != "json_schema":
        return invalid("text.format.type", "The format is text, json_object or json_schema.")
    assert isinstance(spec, dict)
    name, schema, strict = spec.get("name"), spec.get("schema"), spec.get("strict")
    description = spec.get("description", "")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return invalid("text.format.name", f"The format's name is {NAME_RULE}.")
    if not isinstance(schema, dict):
        return invalid("text.format.schema", "'schema' must be a JSON Schema.")
    if strict is not None and not isinstance(strict, bool):
        return invalid("text.format.strict", "'strict' must be true or false.")
    if not isinstance(description, str):
        return invalid("text.format.description", "'description' must be a string.")
    return OutputFormat("json_schema", name, schema, strict, description)


def parse_metadata(value: Any, body: dict[str, Any]) -> Any:
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_METADATA
        or not all(
            len(key) <= 64 and isinstance(v, str) and len(v) <= 512 for key, v in value.items()
        )
    ):
        return invalid(
            "metadata", "'metadata' holds up to 16 keys (64 characters) of strings (512)."
        )
    return value
