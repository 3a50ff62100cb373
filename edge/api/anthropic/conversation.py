"""The parts of an Anthropic Messages request the field table can't check alone: `system`,
`messages` (text, tool_use and tool_result blocks), `tools`, `tool_choice`, `stop_sequences`
and `metadata`, each with the JSON Schema that says the same, read with Anthropic's rules into
what a Chat Completions request becomes (the same `Turn`s, `Tool`s and tool choice).

What a block may carry that changes nothing here is taken and left (`cache_control`,
`citations`). An earlier answer's thinking blocks are kept with the assistant's turn as
`Thought`s, each naming who wrote it by its signature: they go back only to a provider of that
kind (`gateway.adapters.messages.Thought`). A system message in the conversation (as Claude
Code sends them) is kept at its place: a dialect that takes one system prompt only joins them
into it in order. Images, documents and the server tools Anthropic runs on its side are
refused by name: no provider behind the gateway runs them for it.

A problem is named by its path as Anthropic names it: `messages.3.content.0.type`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from edge.api.conversations import history_of, spoken
from edge.api.fields import JsonSchema, invalid
from edge.api.images import ANTHROPIC_IMAGE_BLOCK, anthropic_block, unsupported_content
from edge.api.json_body import ApiError
from edge.api.openai.chat_messages import MAX_MESSAGES, MAX_STOP_SEQUENCES
from edge.api.openai.chat_tools import NAME
from gateway.adapters.messages import Image, Thought, ToolCall, Turn

NAME_PATTERN = f"^{NAME.pattern}$"
# An earlier answer's thinking: kept with its turn, for the provider kind that wrote it.
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
MEDIA_BLOCKS = frozenset({"document", "search_result", "container_upload"})

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
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"anyOf": [TEXT_BLOCK, ANTHROPIC_IMAGE_BLOCK]}},
            ]
        },
        "is_error": {"type": "boolean"},
    },
}
THINKING_BLOCK: JsonSchema = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"enum": sorted(THINKING_BLOCKS)},
        "thinking": {"type": "string"},
        "signature": {"type": "string"},
        "data": {"type": "string"},
    },
}
MESSAGES_SCHEMA: JsonSchema = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_MESSAGES,
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["user", "assistant", "system"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "items": {
                            "anyOf": [
                                TEXT_BLOCK,
                                ANTHROPIC_IMAGE_BLOCK,
                                TOOL_USE_BLOCK,
                                TOOL_RESULT_BLOCK,
                                THINKING_BLOCK,
                            ]
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


def _unsupported(message: str, at: str) -> ApiError:
    return ApiError(400, "unsupported_parameter", message, at)


def _texts(content: Any, at: str) -> str | ApiError:
    """A string, or text blocks joined by new lines."""
    found = _content(content, at, images=False)
    return found if isinstance(found, ApiError) else found[0]


def _content(
    content: Any, at: str, *, images: bool = True
) -> tuple[str, tuple[Image, ...]] | ApiError:
    """A string, or text blocks (joined by new lines) and, where `images`, image blocks; a
    document is refused."""
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        return invalid(at, f"'{at}' must be a string or a list of text blocks.")
    texts, found = [], []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind in MEDIA_BLOCKS:
            return unsupported_content(f"{kind} blocks", f"{at}.{index}.type")
        if images and kind == "image":
            assert isinstance(block, dict)
            image = anthropic_block(block, f"{at}.{index}")
            if isinstance(image, ApiError):
                return image
            found.append(image)
            continue
        if kind != "text" or not isinstance(block.get("text"), str):
            what = "a text or an image block" if images else "a text block"
            return invalid(f"{at}.{index}", f"Each block here is {what}.")
        texts.append(block["text"])
    return "\n".join(texts), tuple(found)


def parse_system(value: Any, body: dict[str, Any]) -> Any:
    """The system prompt: a string, or text blocks joined by new lines."""
    if value is None:
        return ""
    return _texts(value, "system")


def _thought(block: dict[str, Any], at: str) -> Thought | ApiError:
    if block["type"] == "redacted_thinking":
        data = block.get("data")
        if not isinstance(data, str):
            return invalid(f"{at}.data", "A redacted_thinking block's 'data' must be a string.")
        return Thought("", "anthropic", redacted=data)
    text, signature = block.get("thinking"), block.get("signature", "")
    if not isinstance(text, str):
        return invalid(f"{at}.thinking", "A thinking block's 'thinking' must be a string.")
    if not isinstance(signature, str):
        return invalid(f"{at}.signature", "A thinking block's 'signature' must be a string.")
    return Thought.signed(text, signature)


def _block(
    block: Any, at: str, role: str, turns: list[Turn], calls: dict[str, str]
) -> ApiError | None:
    """One content block appended to `turns` as the chat endpoint's turns hold it."""
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(block, dict) or not isinstance(kind, str):
        return invalid(at, "Each content block is an object with a 'type'.")
    if kind in THINKING_BLOCKS:
        if role != "assistant":
            return invalid(f"{at}.type", f"A {kind} block belongs to an assistant message.")
        thought = _thought(block, at)
        if isinstance(thought, ApiError):
            return thought
        if turns and turns[-1].role == "assistant" and not turns[-1].text:
            last = turns[-1]
            turns[-1] = replace(last, thoughts=(*last.thoughts, thought))
        else:
            turns.append(Turn("assistant", thoughts=(thought,)))
        return None
    if kind in MEDIA_BLOCKS:
        return unsupported_content(f"{kind} blocks", f"{at}.type")
    if kind == "image":
        if role != "user":
            return invalid(f"{at}.type", "An image block belongs to a user message.")
        image = anthropic_block(block, at)
        if isinstance(image, ApiError):
            return image
        if turns and turns[-1].role == "user":
            turns[-1] = replace(turns[-1], images=(*turns[-1].images, image))
        else:
            turns.append(Turn("user", images=(image,)))
        return None
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return invalid(f"{at}.text", "A text block's 'text' must be a string.")
        if turns and turns[-1].role == role and role != "system":  # a message's text: one turn
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
        found = _content(block.get("content", ""), f"{at}.content")
        if isinstance(found, ApiError):
            return found
        text, images = found
        if block.get("is_error") is True:
            text = f"Error: {text}" if text else "Error"
        turns.append(Turn("tool", text, tool_call_id=call_id, name=calls[call_id], images=images))
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
        at = f"messages.{index}"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant", "system"):
            return invalid(f"{at}.role", "'role' must be user, assistant or system.")
        assert isinstance(message, dict)
        content = message.get("content")
        if role == "system":
            text = _texts(content, f"{at}.content")
            if isinstance(text, ApiError):
                return text
            turns.append(Turn("system", text))
            continue
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return invalid(f"{at}.content", "'content' must be a string or a list of blocks.")
        for place, block in enumerate(blocks):
            problem = _block(block, f"{at}.content.{place}", role, turns, calls)
            if problem is not None:
                return problem
    # A system message may come last (Claude Code's does): the user's is the last spoken.
    said = spoken(turns)
    last_role = next((m.get("role") for m in reversed(value) if m.get("role") != "system"), "")
    if last_role != "user" or not said or said[-1].role == "assistant":
        return invalid(
            "messages",
            "The last message must be the user's: an assistant's message to continue from "
            "(prefill) is not supported.",
        )
    users = [turn for turn in turns if turn.role == "user"]
    prompt = users[-1].text if users else ""
    if said[-1].role == "user" and not prompt.strip() and not said[-1].images:
        return invalid("messages", "The question cannot be blank.")
    if calls or body.get("tools") or any(turn.images for turn in turns):
        return prompt, (), tuple(turns)
    return prompt, history_of(turns), ()


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
