"""The conversation of a Chat Completions request: its messages checked with OpenAI's rules
(roles, text or text parts, an assistant's tool calls, the tool results that answer them) and
read as (system prompt, question, history), or as `Turn`s when it uses tools."""

from __future__ import annotations

from typing import Any

from edge.api.conversations import history_of, spoken
from edge.api.fields import JsonSchema, invalid
from edge.api.images import IMAGE_URL, by_url, unsupported_content
from edge.api.json_body import ApiError
from edge.api.openai.chat_tools import tool_calls_of, tool_turn
from gateway.adapters.messages import Image, ToolCall, Turn

# As many as an agent's long run holds (OpenAI's arrays take 2,048). A conversation's length has
# no cap of its own: the body limit bounds it (BODY_LIMIT_CHAT_BYTES), and a conversation longer
# than every provider's context window is a 400 `context_length_exceeded` before any call.
MAX_MESSAGES = 2048
MAX_STOP_SEQUENCES = 4
SYSTEM_ROLES = ("system", "developer")
ROLES = (*SYSTEM_ROLES, "user", "assistant")

# A parameter the gateway can't honour may still be sent empty, as some SDKs do.
EMPTY: JsonSchema = {
    "anyOf": [{"type": "null"}, {"const": False}, {"type": "array", "maxItems": 0}]
}


def is_empty(value: Any) -> bool:
    return value is None or value is False or value == []


TEXT_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
IMAGE_PART: JsonSchema = {
    "type": "object",
    "required": ["type", "image_url"],
    "properties": {
        "type": {"const": "image_url"},
        "image_url": {
            "type": "object",
            "required": ["url"],
            "properties": {
                "url": IMAGE_URL,
                "detail": {"enum": ["auto", "low", "high"]},
            },
        },
    },
}
MESSAGE: JsonSchema = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": [*ROLES, "tool"]},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"anyOf": [TEXT_PART, IMAGE_PART]}},
                {"type": "null"},
            ],
            "description": "Text, or text parts (joined by new lines) and, in a user's "
            "message, image_url parts; null only beside an assistant's tool calls.",
        },
        "tool_calls": {
            "type": ["array", "null"],
            "description": "An assistant's tool calls: id, type function, function (name, "
            "arguments as JSON text).",
        },
        "tool_call_id": {"type": "string", "description": "A tool message: the call answered."},
        "function_call": {**EMPTY, "description": "Not supported: function calls."},
    },
    # Text is needed, but beside an assistant's tool calls; a tool's result names its call.
    "anyOf": [
        {"required": ["content"], "properties": {"content": {"type": ["string", "array"]}}},
        {
            "required": ["tool_calls"],
            "properties": {"role": {"const": "assistant"}, "tool_calls": {"minItems": 1}},
        },
    ],
    "allOf": [
        {"if": {"properties": {"role": {"const": "tool"}}}, "then": {"required": ["tool_call_id"]}},
        {
            "if": {"properties": {"role": {"const": "assistant"}}},
            "else": {"properties": {"tool_calls": EMPTY}},
        },
    ],
}


def _message_content(
    content: Any, index: int, role: Any
) -> tuple[str, tuple[Image, ...]] | ApiError:
    """A message's content: a string, or text parts (`[{"type": "text", "text": ...}]`) and,
    in a user's message, image_url parts."""
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return content, ()
    if isinstance(content, list):
        texts, images = [], []
        for place, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            at = f"{where}[{place}]"
            if kind == "image_url" and role == "user":
                assert isinstance(part, dict)
                spec = part.get("image_url")
                url = spec.get("url") if isinstance(spec, dict) else None
                image = by_url(url, f"{at}.image_url.url")
                if isinstance(image, ApiError):
                    return image
                images.append(image)
                continue
            if kind in ("input_audio", "file"):
                return unsupported_content(f"{kind} parts", at)
            if kind != "text":
                return invalid(at, "A content part is text, or image_url in a user's message.")
            if not isinstance(part.get("text"), str):
                return invalid(at, "A text part needs a 'text' string.")
            texts.append(part["text"])
        return "\n".join(texts), tuple(images)
    return invalid(where, f"'{where}' must be a string or a list of content parts.")


def conversation(messages: Any, body: dict[str, Any]) -> Any:
    """(system prompt, question, the turns before it, the whole conversation as `Turn`s when
    it uses tools) from a Chat Completions message list."""
    if not isinstance(messages, list) or not messages:
        return invalid("messages", "'messages' must be a non-empty list.")
    if len(messages) > MAX_MESSAGES:
        return invalid("messages", f"'messages' may hold at most {MAX_MESSAGES} messages.")
    system: list[str] = []
    turns: list[Turn] = []
    calls: dict[str, str] = {}  # the calls made so far: id → tool name
    waiting: list[str] = []  # the last assistant message's calls not yet answered
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return invalid(f"messages[{index}]", "Each message must be an object.")
        turn = _turn(message, index, calls)
        if isinstance(turn, ApiError):
            return turn
        if turn.role == "tool" and turn.tool_call_id not in waiting:
            return invalid(
                f"messages[{index}].tool_call_id",
                "A tool message must come right after the assistant message whose call it "
                "answers (with the other results of that message), once.",
            )
        if turn.role == "tool":
            waiting.remove(turn.tool_call_id)
        elif waiting:
            return _unanswered(index, waiting)
        if turn.tool_calls:
            waiting = [call.id for call in turn.tool_calls]
        total += len(turn.text) + sum(len(call.arguments) for call in turn.tool_calls)
        if turn.role in SYSTEM_ROLES and not turns:  # before the conversation: the system prompt
            system.append(turn.text)
        elif turn.role in SYSTEM_ROLES:  # within it: kept at its place
            turns.append(Turn("system", turn.text))
        else:
            turns.append(turn)
    if waiting:
        return _unanswered(None, waiting)
    said = spoken(turns)
    if not said or said[-1].role not in ("user", "tool"):
        return invalid(
            "messages",
            "The last message (after any system ones) must be the user's, or a tool's result.",
        )
    users = [turn for turn in turns if turn.role == "user"]
    prompt = users[-1].text if users else ""
    if said[-1].role == "user" and not prompt.strip() and not said[-1].images:
        return invalid(f"messages[{len(messages) - 1}].content", "The question cannot be blank.")
    if calls or body.get("tools") or any(turn.images for turn in turns):
        return "\n\n".join(system), prompt, (), tuple(turns)
    return "\n\n".join(system), prompt, history_of(turns), ()


def _unanswered(index: int | None, waiting: list[str]) -> ApiError:
    where = "messages" if index is None else f"messages[{index}]"
    return invalid(
        where,
        "Each tool call of an assistant message must be answered by a tool message right "
        f"after it; not answered: {', '.join(waiting)}.",
    )


def _turn(message: dict[str, Any], index: int, calls: dict[str, str]) -> Turn | ApiError:
    role = message.get("role")
    if role == "function":
        return invalid(f"messages[{index}].role", "'function' messages are deprecated: use 'tool'.")
    if role not in (*ROLES, "tool"):
        return invalid(
            f"messages[{index}].role",
            "'role' must be one of 'system', 'developer', 'user', 'assistant' or 'tool'.",
        )
    if not is_empty(message.get("function_call")):
        return invalid(f"messages[{index}]", "'function_call' is deprecated: use 'tool_calls'.")
    made: tuple[ToolCall, ...] = ()
    if role == "assistant":
        found = tool_calls_of(message.get("tool_calls"), f"messages[{index}].tool_calls")
        if isinstance(found, ApiError):
            return found
        made = found
    elif not is_empty(message.get("tool_calls")):
        return invalid(f"messages[{index}].tool_calls", "Only an assistant makes tool calls.")
    content = message.get("content")
    read = ("", ()) if content is None and made else _message_content(content, index, role)
    if isinstance(read, ApiError):
        return read
    text, images = read
    if role == "tool":
        return tool_turn(message, index, text, calls)
    calls.update((call.id, call.name) for call in made)
    return Turn(role, text, tool_calls=made, images=images)
