"""The parts of a Responses API request the field table can't check alone: `input` (messages,
function calls and their outputs), the flat function `tools`, `tool_choice`, `text.format` and
`metadata`, each with the JSON Schema that says the same, read with OpenAI's rules into what a
Chat Completions request becomes (`edge/api/openai/chat_messages.py`, `chat_tools.py`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from edge.api.conversations import history_of, spoken
from edge.api.fields import NOT_BLANK, JsonSchema, invalid
from edge.api.images import IMAGE_URL, by_url, unsupported_content
from edge.api.json_body import ApiError
from edge.api.openai.chat_messages import (
    MAX_MESSAGES,
    ROLES,
    SYSTEM_ROLES,
)
from edge.api.openai.chat_tools import NAME, NAME_RULE
from edge.api.openai.responses_tools import FREEFORM_INPUT
from gateway.adapters.messages import Image, OutputFormat, Thought, ToolCall, Turn

TEXT_TYPES = ("input_text", "output_text")
NAME_PATTERN = f"^{NAME.pattern}$"
TEXT_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"enum": list(TEXT_TYPES)}, "text": {"type": "string"}},
}
IMAGE_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "image_url"],
    "properties": {
        "type": {"const": "input_image"},
        "image_url": IMAGE_URL,
        "detail": {"enum": ["auto", "low", "high"]},
    },
}
PARTS: JsonSchema = {"type": "array", "items": {"anyOf": [TEXT_PART, IMAGE_PART]}}
MESSAGE_ITEM: JsonSchema = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "type": {"const": "message"},
        "role": {"enum": list(ROLES)},
        "content": {"anyOf": [{"type": "string"}, PARTS]},
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
        "output": {"anyOf": [{"type": "string"}, PARTS]},
    },
}
# A custom tool's call and its output, as the Responses API replays them.
CUSTOM_CALL_ITEM: JsonSchema = {
    "type": "object",
    "required": ["type", "call_id"],
    "properties": {
        "type": {"enum": ["custom_tool_call", "custom_tool_call_output"]},
        "call_id": CALL_ID,
        "name": {"type": "string"},
        "input": {"type": "string"},
    },
}
INPUT_SCHEMA: JsonSchema = {
    "anyOf": [
        {"type": "string", "pattern": NOT_BLANK},
        {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_MESSAGES,
            "items": {"anyOf": [MESSAGE_ITEM, FUNCTION_CALL_ITEM, OUTPUT_ITEM, CUSTOM_CALL_ITEM]},
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
    "properties": {
        "format": {"anyOf": [{"type": "null"}, FORMAT_SCHEMA]},
        "verbosity": {"type": ["string", "null"], "enum": ["low", "medium", "high", None]},
    },
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
    found = _content(content, where, images=False)
    return found if isinstance(found, ApiError) else found[0]


def _content(
    content: Any, where: str, *, images: bool = True
) -> tuple[str, tuple[Image, ...]] | ApiError:
    """Text, or text parts (input_text / output_text) joined by new lines, and where
    `images`, input_image parts."""
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        return invalid(where, f"'{where}' must be a string or a list of content parts.")
    texts, found = [], []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}[{index}]"
        if images and kind == "input_image":
            assert isinstance(part, dict)
            if part.get("file_id") is not None:
                return unsupported_content("stored files", f"{at}.file_id")
            image = by_url(part.get("image_url"), f"{at}.image_url")
            if isinstance(image, ApiError):
                return image
            found.append(image)
            continue
        if kind in ("input_image", "input_file", "input_audio"):
            return unsupported_content(f"{kind} parts", at)
        if kind not in TEXT_TYPES or not isinstance(part.get("text"), str):
            return invalid(at, "A content part is input_text, output_text or input_image.")
        texts.append(part["text"])
    return "\n".join(texts), tuple(found)


def _item(item: Any, at: str, turns: list[Turn], calls: dict[str, str]) -> str | ApiError | None:
    """One input item appended to `turns` (None), or a system message's text, or the error."""
    if not isinstance(item, dict):
        return invalid(at, "Each input item must be an object.")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            return invalid(f"{at}.role", "'role' must be user, assistant, system or developer.")
        found = _content(item.get("content"), f"{at}.content", images=role == "user")
        if isinstance(found, ApiError):
            return found
        text, images = found
        if role in SYSTEM_ROLES:
            return text
        if role == "assistant" and turns and _only_thought(turns[-1]):
            turns[-1] = replace(turns[-1], text=text)  # the reasoning before this message
        else:
            turns.append(Turn(role, text, images=images))
        return None
    if kind == "reasoning":
        # An earlier answer's reasoning, replayed: its summary kept with the assistant's turn,
        # which no chat provider takes back (dropped, and named so).
        summary = item.get("summary")
        parts = summary if isinstance(summary, list) else []
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        thought = Thought("\n".join(texts), "openai-responses")
        if turns and _only_thought(turns[-1]):
            turns[-1] = replace(turns[-1], thoughts=(*turns[-1].thoughts, thought))
        else:
            turns.append(Turn("assistant", thoughts=(thought,)))
        return None
    call_id = item["call_id"] if isinstance(item.get("call_id"), str) else ""
    if kind in CALL_ITEMS and not call_id:
        return invalid(f"{at}.call_id", f"A {kind} item needs its 'call_id'.")
    if kind == "custom_tool_call":  # a custom tool's call: its free text, as the function's input
        name, given = item.get("name"), item.get("input")
        if not isinstance(name, str) or not name or not isinstance(given, str):
            return invalid(at, "A custom_tool_call item needs a 'name' and its 'input' text.")
        item = {"name": name, "arguments": json.dumps({FREEFORM_INPUT: given})}
        kind = "function_call"
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
    if kind in ("function_call_output", "custom_tool_call_output"):
        if call_id not in calls:
            return invalid(
                f"{at}.call_id", f"No earlier function_call item has the call_id '{call_id}'."
            )
        found = _content(item.get("output"), f"{at}.output")
        if isinstance(found, ApiError):
            return found
        text, images = found
        turns.append(Turn("tool", text, tool_call_id=call_id, name=calls[call_id], images=images))
        return None
    if kind == "item_reference":
        return ApiError(
            400, "unsupported_parameter", "This gateway stores no items to refer to.", at
        )
    return ApiError(
        400,
        "unsupported_parameter",
        "Input items are messages, reasoning, function and custom tool calls and their "
        "outputs only.",
        f"{at}.type",
    )


# The items that name a call: a function's or a custom tool's, and their outputs.
CALL_ITEMS = (
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
)


def _only_thought(turn: Turn) -> bool:
    return (
        turn.role == "assistant" and not turn.text and not turn.tool_calls and bool(turn.thoughts)
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
        if found is not None and not turns:  # before the conversation: the system prompt
            system.append(found)
        elif found is not None:  # within it: kept at its place
            turns.append(Turn("system", found))
    said = spoken(turns)
    if not said or said[-1].role not in ("user", "tool"):
        return invalid(
            "input", "The last item (after any system ones) must be the user's, or a tool's output."
        )
    users = [turn for turn in turns if turn.role == "user"]
    prompt = users[-1].text if users else ""
    if said[-1].role == "user" and not prompt.strip() and not said[-1].images:
        return invalid("input", "The question cannot be blank.")
    if calls or body.get("tools") or any(turn.images for turn in turns):
        return "\n\n".join(system), prompt, (), tuple(turns)
    return "\n\n".join(system), prompt, history_of(turns), ()


def parse_text(value: Any, body: dict[str, Any]) -> Any:
    """(None for text, or the `OutputFormat` `text.format` asks for; `text.verbosity` or "")."""
    if value is None:
        return None, ""
    if not isinstance(value, dict):
        return invalid("text", "'text' must be an object.")
    if set(value) - {"format", "verbosity"}:
        unknown = min(set(value) - {"format", "verbosity"})
        return invalid(f"text.{unknown}", "'text' takes 'format' and 'verbosity'.")
    verbosity = value.get("verbosity")
    if verbosity is not None and verbosity not in ("low", "medium", "high"):
        return invalid("text.verbosity", "verbosity is low, medium or high.")
    output = _format(value.get("format"))
    return output if isinstance(output, ApiError) else (output, verbosity or "")


def _format(spec: Any) -> Any:
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
