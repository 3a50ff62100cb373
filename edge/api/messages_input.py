"""The parts of an Anthropic Messages request the field table can't check alone: `system`,
`messages` (text, tool_use and tool_result blocks), `tools`, `tool_choice`, `stop_sequences`
and `metadata`, each with the JSON Schema that says the same, read with Anthropic's rules into
what a Chat Completions request becomes (the same `Turn`s, `Tool`s and tool choice).

What a block may carry that changes nothing here is taken and left (`cache_control`,
`citations`); an earlier answer's thinking blocks are left out of the conversation sent on,
as Anthropic's API drops them from earlier turns itself. Images, documents and the server
tools Anthropic runs on its side are refused by name: no provider behind the gateway runs
them for it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from edge.api.chat_messages import MAX_MESSAGES, MAX_STOP_SEQUENCES
from edge.api.chat_tools import MAX_TOOLS, NAME, NAME_RULE
from edge.api.fields import JsonSchema, invalid
from edge.api.json_body import ApiError
from gateway.adapters.messages import Tool, ToolCall, Turn

NAME_PATTERN = f"^{NAME.pattern}$"
# An earlier answer's thinking: dropped from the conversation sent on, as Anthropic drops it.
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
MEDIA_BLOCKS = frozenset({"image", "document", "search_result", "container_upload"})

TEXT_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
TOOL_USE_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type", "id", "name", "input"],
    "properties": {
        "type": {"const": "tool_use"},
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "input": {"type": "object"},
    },
}
TOOL_RESULT_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type", "tool_use_id"],
    "properties": {
        "type": {"const": "tool_result"},
        "tool_use_id": {"type": "string", "minLength": 1},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_BLOCK}]},
        "is_error": {"type": "boolean"},
    },
}
THINKING_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"enum": sorted(THINKING_BLOCKS)}},
}
MESSAGES_SCHEMA: JsonSchema = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_MESSAGES,
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["user", "assistant"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "items": {
                            "anyOf": [TEXT_BLOCK, TOOL_USE_BLOCK, TOOL_RESULT_BLOCK, THINKING_BLOCK]
                        },
                    },
                ]
            },
        },
    },
}
SYSTEM_SCHEMA: JsonSchema = {
    "anyOf": [{"type": "null"}, {"type": "string"}, {"type": "array", "items": TEXT_BLOCK}]
}
TOOLS_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_TOOLS,
    "items": {
        "type": "object",
        "required": ["name", "input_schema"],
        "properties": {
            "type": {"const": "custom"},
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "description": {"type": ["string", "null"]},
            "input_schema": {"type": "object"},
        },
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
STOP_SEQUENCES_SCHEMA: JsonSchema = {
    "type": ["array", "null"],
    "maxItems": MAX_STOP_SEQUENCES,
    "items": {"type": "string", "minLength": 1},
}
METADATA_SCHEMA: JsonSchema = {
    "type": ["object", "null"],
    "properties": {"user_id": {"type": ["string", "null"], "maxLength": 256}},
    "additionalProperties": False,
}
# Anthropic's choices in the chat endpoint's words.
CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _unsupported(message: str, at: str) -> ApiError:
    return ApiError(400, "unsupported_parameter", message, at)


def _texts(content: Any, at: str) -> str | ApiError:
    """A string, or text blocks joined by new lines; an image or a document is refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return invalid(at, f"'{at}' must be a string or a list of text blocks.")
    texts = []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind in MEDIA_BLOCKS:
            return _unsupported(f"Only text is supported here: {kind} blocks are not.", at)
        if kind != "text" or not isinstance(block.get("text"), str):
            return invalid(f"{at}[{index}]", "Each block here is a text block.")
        texts.append(block["text"])
    return "\n".join(texts)


def parse_system(value: Any, body: dict[str, Any]) -> Any:
    """The system prompt: a string, or text blocks joined by new lines."""
    if value is None:
        return ""
    return _texts(value, "system")


def _block(
    block: Any, at: str, role: str, turns: list[Turn], calls: dict[str, str]
) -> ApiError | None:
    """One content block appended to `turns` as the chat endpoint's turns hold it."""
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(block, dict) or not isinstance(kind, str):
        return invalid(at, "Each content block is an object with a 'type'.")
    if kind in THINKING_BLOCKS:
        return None
    if kind in MEDIA_BLOCKS:
        return _unsupported(f"Only text is supported: {kind} blocks are not.", f"{at}.type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return invalid(f"{at}.text", "A text block's 'text' must be a string.")
        if turns and turns[-1].role == role:  # a message's text blocks: one turn
            turns[-1] = replace(turns[-1], text="\n".join(filter(None, (turns[-1].text, text))))
        else:
            turns.append(Turn(role, text))
        return None
    if kind == "tool_use":
        if role != "assistant":
            return invalid(f"{at}.type", "A tool_use block belongs to an assistant message.")
        call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            return invalid(at, "A tool_use block needs its 'id' and 'name'.")
        if not isinstance(arguments, dict):
            return invalid(f"{at}.input", "A tool_use block's 'input' must be an object.")
        call = ToolCall(call_id, name, json.dumps(arguments, ensure_ascii=False))
        calls[call_id] = name
        if turns and turns[-1].role == "assistant":  # its text and calls: one assistant turn
            turns[-1] = replace(turns[-1], tool_calls=(*turns[-1].tool_calls, call))
        else:
            turns.append(Turn("assistant", tool_calls=(call,)))
        return None
    if kind == "tool_result":
        if role != "user":
            return invalid(f"{at}.type", "A tool_result block belongs to a user message.")
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or call_id not in calls:
            return invalid(
                f"{at}.tool_use_id", f"No earlier tool_use block has the id '{call_id}'."
            )
        text = _texts(block.get("content", ""), f"{at}.content")
        if isinstance(text, ApiError):
            return text
        if block.get("is_error") is True:
            text = f"Error: {text}" if text else "Error"
        turns.append(Turn("tool", text, tool_call_id=call_id, name=calls[call_id]))
        return None
    return _unsupported(
        f"Content blocks are text, tool_use and tool_result here, not '{kind}': this gateway "
        "runs no server tools.",
        f"{at}.type",
    )


def parse_messages(value: Any, body: dict[str, Any]) -> Any:
    """(question, the turns before it, the whole conversation as `Turn`s when it uses
    tools), as the chat endpoint reads its messages."""
    if not isinstance(value, list) or not value:
        return invalid("messages", "'messages' must be a non-empty list.")
    if len(value) > MAX_MESSAGES:
        return invalid("messages", f"'messages' may hold at most {MAX_MESSAGES} messages.")
    turns: list[Turn] = []
    calls: dict[str, str] = {}  # the calls made so far: tool_use id → tool name
    for index, message in enumerate(value):
        at = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            return invalid(f"{at}.role", "'role' must be user or assistant.")
        assert isinstance(message, dict)
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return invalid(f"{at}.content", "'content' must be a string or a list of blocks.")
        for place, block in enumerate(blocks):
            problem = _block(block, f"{at}.content[{place}]", role, turns, calls)
            if problem is not None:
                return problem
    if value[-1].get("role") != "user" or not turns or turns[-1].role == "assistant":
        return invalid(
            "messages",
            "The last message must be the user's: an assistant's message to continue from "
            "(prefill) is not supported.",
        )
    users = [turn for turn in turns if turn.role == "user"]
    prompt = users[-1].text if users else ""
    if turns[-1].role == "user" and not prompt.strip():
        return invalid("messages", "The question cannot be blank.")
    if calls or body.get("tools"):
        return prompt, (), tuple(turns)
    return prompt, tuple((t.role, t.text) for t in turns[:-1]), ()


def parse_tools(value: Any, body: dict[str, Any]) -> Any:
    """The client tools offered, as `Tool`s (() when none); a server tool is refused."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        return invalid("tools", f"'tools' must be a list of at most {MAX_TOOLS} tools.")
    tools: list[Tool] = []
    for index, item in enumerate(value):
        at = f"tools[{index}]"
        if not isinstance(item, dict):
            return invalid(at, "Each tool is an object.")
        kind = item.get("type", "custom")
        if kind != "custom":
            return _unsupported(
                f"Only client tools (name, input_schema) are supported, not '{kind}': this "
                "gateway runs no server tools.",
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
    return tuple(tools)


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


def parse_stop_sequences(value: Any, body: dict[str, Any]) -> Any:
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or len(value) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in value)
    ):
        return invalid(
            "stop_sequences",
            f"'stop_sequences' holds up to {MAX_STOP_SEQUENCES} non-empty strings.",
        )
    return tuple(value)


def parse_metadata(value: Any, body: dict[str, Any]) -> Any:
    """The end user's id (`metadata.user_id`), "" when none."""
    if value is None:
        return ""
    user = value.get("user_id") if isinstance(value, dict) else None
    if not isinstance(value, dict) or set(value) - {"user_id"}:
        return invalid("metadata", "'metadata' holds only 'user_id'.")
    if user is not None and (not isinstance(user, str) or len(user) > 256):
        return invalid("metadata.user_id", "'user_id' is a string of at most 256 characters.")
    return user or ""
