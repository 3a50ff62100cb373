"""Anthropic's extended thinking in the fake provider: the request's `thinking`, checked as the
Messages API checks it, the thinking blocks a request carries back, and the answer's own.

`thinking` {"type": "enabled", "budget_tokens": N} (N at least 1024 and below max_tokens) or
{"type": "adaptive"} makes any model think: the answer (text or tool_use) starts with a
`thinking` block {"type": "thinking", "thinking": THINKING_TEXT, "signature": ...}, streamed as
its content_block_start (empty thinking and signature), `thinking_delta` events, one
`signature_delta` and its content_block_stop, the answer's own blocks following at the next
index; its tokens count in output_tokens. `display` "omitted" sends the block with an empty
`thinking` (and so no thinking_delta), signed all the same. {"type": "disabled"} or no
`thinking`: no block. With thinking on, as Anthropic's: temperature may only be 1, top_p at
least 0.95, top_k unset, and tool_choice may not force a tool.

Every thinking block in a request's assistant messages must carry a signature this fake made for
its text (`thinking.sign`, keyed with `signature_key`); else it is Anthropic's 400 "Invalid
`signature` in `thinking` block" — a real Anthropic refuses thinking it didn't sign. The fake
never redacts, so a `redacted_thinking` block is refused the same way. With thinking enabled,
the assistant message holding the tool_use that a final tool_result answers must start with a
thinking block, as Anthropic requires.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devtools.fake_provider import dialects, thinking
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import ANTHROPIC, SSE, Reply, dumps, json_reply

MIN_BUDGET_TOKENS = 1024
_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_COMPATIBILITY = f"Please consult our documentation at {_DOCS}#feature-compatibility"


@dataclass(frozen=True, slots=True)
class Thinking:
    """The request's thinking, on: whether the thought is shown or `display` omitted it."""

    shown: bool
    enabled: bool  # "enabled" (with a budget), not "adaptive"


def _bad(message: str) -> Reply:
    return dialects.error(ANTHROPIC, "bad_request", message=message)


def read(request: dict[str, Any], config: FakeConfig) -> Thinking | None | Reply:
    """The request's thinking (None: off), or the 400 Anthropic answers to it."""
    refused = _carried(request["messages"], config.signature_key)
    if refused is not None:
        return refused
    param = request.get("thinking")
    if param is None:
        return None
    if not isinstance(param, dict):
        return _bad("thinking: Input should be a valid dictionary or object to extract fields from")
    kind = param.get("type")
    if kind not in ("enabled", "disabled", "adaptive"):
        if kind is None:
            return _bad("thinking: Unable to extract tag using discriminator 'type'")
        return _bad(
            f"thinking: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'adaptive', 'disabled', 'enabled'"
        )
    if kind == "disabled":
        return None
    display = param.get("display")
    if display not in (None, "summarized", "omitted"):
        return _bad(f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'")
    if kind == "enabled":
        budget = param.get("budget_tokens")
        if budget is None:
            return _bad("thinking.enabled.budget_tokens: Field required")
        if isinstance(budget, bool) or not isinstance(budget, int):
            return _bad("thinking.enabled.budget_tokens: Input should be a valid integer")
        if budget < MIN_BUDGET_TOKENS:
            return _bad(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to "
                f"{MIN_BUDGET_TOKENS}"
            )
        if request["max_tokens"] <= budget:
            return _bad(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {_DOCS}#max-tokens-and-context-window-size"
            )
    refused = _incompatible(request)
    if refused is not None:
        return refused
    on = Thinking(shown=display != "omitted", enabled=kind == "enabled")
    if on.enabled:
        return _unthought_tool_turn(request["messages"]) or on
    return on


def _incompatible(request: dict[str, Any]) -> Reply | None:
    temperature = request.get("temperature")
    if temperature is not None and temperature != 1:
        return _bad(
            f"`temperature` may only be set to 1 when thinking is enabled. {_COMPATIBILITY}"
        )
    top_p = request.get("top_p")
    if isinstance(top_p, int | float) and top_p < 0.95:
        return _bad(
            "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. "
            + _COMPATIBILITY
        )
    if request.get("top_k") is not None:
        return _bad(f"`top_k` must be unset when thinking is enabled. {_COMPATIBILITY}")
    choice = request.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return _bad("Thinking may not be enabled when tool_choice forces tool use.")
    return None


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _carried(messages: list[Any], key: str) -> Reply | None:
    """The 400 for a thinking block (in an assistant message) this fake didn't sign."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for position, block in enumerate(_blocks(message)):
            kind = block.get("type") if isinstance(block, dict) else None
            where = f"messages.{index}.content.{position}"
            if kind == "thinking":
                for field in ("thinking", "signature"):
                    if not isinstance(block.get(field), str):
                        return _bad(f"{where}.thinking.{field}: Field required")
                if not thinking.signed_here(block["thinking"], block["signature"], key):
                    return _bad(f"{where}: Invalid `signature` in `thinking` block")
            elif kind == "redacted_thinking":
                if not isinstance(block.get("data"), str):
                    return _bad(f"{where}.redacted_thinking.data: Field required")
                return _bad(f"{where}: Invalid `data` in `redacted_thinking` block")
    return None


def _unthought_tool_turn(messages: list[Any]) -> Reply | None:
    """Thinking enabled: the 400 when the assistant message whose tool_use the final message's
    tool_result answers doesn't start with a thinking block."""
    if len(messages) < 2:
        return None
    last, previous = messages[-1], messages[-2]
    answers_tools = any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in _blocks(last)
    )
    if not answers_tools or not isinstance(previous, dict) or previous.get("role") != "assistant":
        return None
    blocks = _blocks(previous)
    first = blocks[0].get("type") if blocks and isinstance(blocks[0], dict) else "text"
    if first in ("thinking", "redacted_thinking"):
        return None
    return _bad(
        f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
        f"`redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final "
        "`assistant` message must start with a thinking block (preceeding the lastmost set of "
        "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
        "previous turns. To avoid this requirement, disable `thinking`. Please consult our "
        f"documentation at {_DOCS}"
    )


# The answer ---------------------------------------------------------------------------------


def with_thinking(reply: Reply, on: Thinking, key: str) -> Reply:
    """A Messages answer (text or tool_use) with the thinking block first."""
    text = thinking.THINKING_TEXT if on.shown else ""
    pieces = thinking.pieces() if on.shown else ()
    signature = thinking.sign(text, key)
    if not reply.stream:
        body = json.loads(reply.chunks[0])
        block = {"type": "thinking", "thinking": text, "signature": signature}
        body["content"] = [block, *body["content"]]
        body["usage"]["output_tokens"] += len(pieces)
        return json_reply(reply.status, body, reply.headers)
    events = [_parse(chunk) for chunk in reply.chunks]
    start, rest = events[0], [e for e in events[1:] if e[0] != "ping"]
    start_block = {"type": "thinking", "thinking": "", "signature": ""}
    out = [
        start,
        ("content_block_start", {"index": 0, "content_block": start_block}),
        ("ping", {}),
    ]
    out.extend(
        ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": p}})
        for p in pieces
    )
    signed = {"type": "signature_delta", "signature": signature}
    out.append(("content_block_delta", {"index": 0, "delta": signed}))
    out.append(("content_block_stop", {"index": 0}))
    for name, data in rest:
        if "index" in data:
            data["index"] += 1
        if name == "message_delta":
            data["usage"]["output_tokens"] += len(pieces)
        out.append((name, data))
    return Reply(
        reply.status,
        SSE,
        [_event(name, data) for name, data in out],
        stream=True,
        headers=reply.headers,
        separator=reply.separator,
    )


def _parse(chunk: bytes) -> tuple[str, dict[str, Any]]:
    head, data = chunk.split(b"\n", 1)
    payload = json.loads(data.removeprefix(b"data: "))
    del payload["type"]
    return head.removeprefix(b"event: ").decode(), payload


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps({"type": name, **data}) + b"\n\n"
