"""Tools and structured output in each dialect's words: the request's tools, tool choice,
tool-call and tool-result turns and output format going up, the model's tool calls coming back.

The request holds them in OpenAI's terms (`messages`); Anthropic carries calls as `tool_use`
blocks and results as `tool_result` blocks in a user message, and asks for JSON through one
forced tool whose input is the answer; Ollama takes OpenAI's function shape with arguments as
objects, results as `tool` messages naming the tool, and JSON as `format`. Ollama has no
tool choice: a call forced to one tool is asked for as `format`, that tool's parameters schema,
whose JSON answer is the call's arguments (`forced_by_format`).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from gateway.adapters.messages import (
    CompletionRequest,
    Image,
    OutputFormat,
    Tool,
    ToolCall,
    Turn,
)

# The forced tool that carries Anthropic's JSON answer when the output format names none.
JSON_TOOL = "json_answer"
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as an object, for the dialects that carry one; arguments that
    aren't a JSON object (a model's mistake, echoed back) are carried as {}."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def new_call_id() -> str:
    """An id for a call whose upstream gave none (Ollama's), as OpenAI spells them."""
    return f"call_{secrets.token_hex(12)}"


def arguments_text(arguments: Any) -> str:
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


# OpenAI ------------------------------------------------------------------------------------


def openai_tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def openai_tool_choice(choice: str, tools: tuple[Tool, ...]) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def openai_response_format(output: OutputFormat) -> dict[str, Any]:
    if output.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": output.name, "schema": output.schema or ANY_OBJECT}
    if output.description:
        spec["description"] = output.description
    if output.strict is not None:
        spec["strict"] = output.strict
    return {"type": "json_schema", "json_schema": spec}


def add_openai(payload: dict[str, Any], request: CompletionRequest) -> None:
    if request.tools:
        payload["tools"] = [openai_tool(tool) for tool in request.tools]
        if request.tool_choice:
            payload["tool_choice"] = openai_tool_choice(request.tool_choice, request.tools)
    if request.output is not None:
        payload["response_format"] = openai_response_format(request.output)


def openai_calls(raw: Any) -> tuple[ToolCall, ...] | None:
    """The tool calls of an OpenAI message (None when they are malformed)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return None
    calls = []
    for item in raw:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        arguments = function.get("arguments")
        calls.append(
            ToolCall(
                id=str(item.get("id") or new_call_id()),
                name=function["name"],
                arguments=arguments if isinstance(arguments, str) else arguments_text(arguments),
            )
        )
    return tuple(calls)


# Anthropic ---------------------------------------------------------------------------------


def json_tool_name(request: CompletionRequest) -> str:
    """The forced tool that stands for the output format on Anthropic ("" when none)."""
    if request.output is None:
        return ""
    return request.output.name or JSON_TOOL


def add_anthropic(payload: dict[str, Any], request: CompletionRequest) -> None:
    tools = [
        {
            "name": tool.name,
            **({"description": tool.description} if tool.description else {}),
            "input_schema": tool.parameters or ANY_OBJECT,
        }
        for tool in request.tools
    ]
    output = request.output
    if output is not None:
        tools.append(
            {
                "name": json_tool_name(request),
                "description": output.description or "Give the answer as this tool's input.",
                "input_schema": output.schema or ANY_OBJECT,
            }
        )
        payload["tool_choice"] = {"type": "tool", "name": json_tool_name(request)}
    elif request.tool_choice:
        choice = request.tool_choice
        payload["tool_choice"] = (
            {"type": {"required": "any"}.get(choice, choice)}
            if choice in ("auto", "none", "required")
            else {"type": "tool", "name": choice}
        )
    if not tools and request.turns:
        # The API reads past tool_use blocks only beside a tool list: the tools they name,
        # declared and not to be called again.
        named = dict.fromkeys(call.name for turn in request.turns for call in turn.tool_calls)
        tools = [{"name": name, "input_schema": ANY_OBJECT} for name in named]
        if tools:
            payload["tool_choice"] = {"type": "none"}
    if tools:
        payload["tools"] = tools


def anthropic_image(image: Image) -> dict[str, Any]:
    source = (
        {"type": "base64", "media_type": image.media_type, "data": image.data}
        if image.data
        else {"type": "url", "url": image.url}
    )
    return {"type": "image", "source": source}


def _thought_blocks(turn: Turn) -> list[dict[str, Any]]:
    """An assistant turn's thinking that Anthropic wrote, as the blocks it signed."""
    blocks: list[dict[str, Any]] = []
    for thought in turn.thoughts:
        if thought.dialect != "anthropic":
            continue
        if thought.redacted:
            blocks.append({"type": "redacted_thinking", "data": thought.redacted})
        elif thought.signature:
            blocks.append(
                {"type": "thinking", "thinking": thought.text, "signature": thought.signature}
            )
    return blocks


def _appended(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """`blocks` added to the last message when it is `role`'s (the API wants user and
    assistant to alternate), else as a message of their own."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == role:
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def anthropic_messages(
    turns: tuple[Turn, ...], *, thoughts: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """The turns as Messages API messages (calls as tool_use blocks, consecutive results as
    tool_result blocks of one user message: the API wants user and assistant to alternate), and
    the texts of the system turns among them, which join the system prompt in order. With
    `thoughts`, an assistant turn's thinking that Anthropic wrote goes first in its message."""
    messages: list[dict[str, Any]] = []
    system: list[str] = []
    for turn in turns:
        if turn.role == "system":
            system.append(turn.text)
            continue
        if turn.role == "tool":
            content: Any = turn.text
            if turn.images:
                text = [{"type": "text", "text": turn.text}] if turn.text else []
                content = [*text, *map(anthropic_image, turn.images)]
            block = {"type": "tool_result", "tool_use_id": turn.tool_call_id, "content": content}
            _appended(messages, "user", [block])
            continue
        blocks: list[dict[str, Any]] = _thought_blocks(turn) if thoughts else []
        blocks += map(anthropic_image, turn.images)
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        blocks += [
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": arguments_object(call.arguments),
            }
            for call in turn.tool_calls
        ]
        if not blocks:
            blocks = [{"type": "text", "text": turn.text}]
        last = messages[-1] if messages else None
        if (
            len(blocks) == 1
            and blocks[0]["type"] == "text"
            and (last is None or last["role"] != turn.role)
        ):
            messages.append({"role": turn.role, "content": turn.text})
        else:
            _appended(messages, turn.role, blocks)
    return messages, system


def anthropic_history(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """A plain conversation (OpenAI's message shape) without its system messages, and their
    texts, which join the system prompt in order."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    if not system:
        return messages, []
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "system":
            continue
        if kept and kept[-1]["role"] == message["role"]:
            kept[-1] = {**kept[-1], "content": f"{kept[-1]['content']}\n\n{message['content']}"}
        else:
            kept.append(message)
    return kept, system


# Ollama ------------------------------------------------------------------------------------


# The schema of a tool that takes no parameters, as `format`: any answer but an object is off it.
EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def forced_by_format(request: CompletionRequest) -> str:
    """The tool whose call an Ollama provider holds the answer to with `format` ("" when
    none): the one tool `tool_choice` names, or the only tool offered under `required`.
    `required` among several tools names none: one schema can't leave the model the choice.
    The Ollama adapter asks for a call so; the ledger can say so by it."""
    choice, offered = request.tool_choice, request.tools
    if not offered or choice in ("", "auto", "none"):
        return ""
    if choice == "required":
        return offered[0].name if len(offered) == 1 else ""
    return choice if any(tool.name == choice for tool in offered) else ""


def add_ollama(payload: dict[str, Any], request: CompletionRequest) -> None:
    forced = forced_by_format(request)
    if forced:
        _hold_to(payload, next(tool for tool in request.tools if tool.name == forced))
        return
    if request.tools and request.tool_choice != "none":
        payload["tools"] = [openai_tool(tool) for tool in request.tools]
    output = request.output
    if output is not None:
        payload["format"] = "json" if output.kind == "json_object" else output.schema or "json"


def _hold_to(payload: dict[str, Any], tool: Tool) -> None:
    """The call to `tool` asked for as Ollama's structured output: no `tools` (the model answers
    content, not a call), `format` the tool's parameters, and a system instruction naming the
    tool with the schema in words, which Ollama's reference advises beside `format`. A request's
    own `response_format` gives way: its answer is this call, which has no text to shape."""
    schema = tool.parameters or EMPTY_OBJECT
    payload["format"] = schema
    about = f" ({tool.description})" if tool.description else ""
    instruction = (
        f"Call the tool {tool.name}{about}: reply with its arguments only, one JSON object "
        f"matching this JSON schema: {json.dumps(schema, ensure_ascii=False)}"
    )
    messages = payload["messages"]
    if messages and messages[0]["role"] == "system":
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
    else:
        messages.insert(0, {"role": "system", "content": instruction})


def held_arguments(text: str) -> str | None:
    """The arguments an answer held by `format` gave, as compact JSON text; None when the answer
    is not a JSON object (not the call's arguments, whatever the format asked)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ollama_messages(request: CompletionRequest, *, thoughts: bool = False) -> list[dict[str, Any]]:
    """The conversation in Ollama's words; with `thoughts`, an assistant turn's thinking that
    Ollama wrote goes back as its `thinking`."""
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": request.system_prompt}] if request.system_prompt else []
    )
    for turn in request.turns:
        message: dict[str, Any] = {"role": turn.role, "content": turn.text}
        if turn.role == "tool":
            message = {"role": "tool", "tool_name": turn.name, "content": turn.text}
        if turn.tool_calls:
            message["tool_calls"] = [
                {"function": {"name": call.name, "arguments": arguments_object(call.arguments)}}
                for call in turn.tool_calls
            ]
        thinking = "".join(t.text for t in turn.thoughts if t.dialect == "ollama")
        if thoughts and thinking:
            message["thinking"] = thinking
        if turn.images:
            message["images"] = [image.data for image in turn.images]
        messages.append(message)
    return messages


def ollama_calls(raw: Any) -> tuple[ToolCall, ...] | None:
    """Ollama's tool calls (arguments as objects) in OpenAI's terms; None when malformed."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return None
    calls = []
    for item in raw:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        call_id = item.get("id") if isinstance(item.get("id"), str) else ""
        calls.append(
            ToolCall(
                id=call_id or new_call_id(),
                name=function["name"],
                arguments=arguments_text(function.get("arguments")),
            )
        )
    return tuple(calls)
