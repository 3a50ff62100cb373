"""The Responses API's answers in OpenAI's shapes: the Response object, whole, and the typed
events of a stream (their JSON Schemas are `edge/api/openai/responses_schemas.py`).

Every shape is a subset of OpenAI's own (`Response`, `ResponseStreamEvent` and its members)
plus the gateway's `failover` object. The output is a reasoning item (when the request asked
for reasoning and the model thought: its summary is the model's thinking when a summary was
asked for; it has no encrypted content, which is OpenAI's own), then an assistant message with
one output_text part and/or function_call items.
"""

from __future__ import annotations

import json
import time
from typing import Any

from edge.api.openai.responses_request import ResponsesBody
from edge.api.openai.responses_tools import FREEFORM_INPUT
from edge.api.openai.shapes import failover_object
from gateway.adapters.messages import Piece, Reasoning, ToolCallDelta
from gateway.routing.cascade import RouteResult


def freeform_input(arguments: str) -> str:
    """A custom tool's free-text input, from the arguments of the function that stood for it
    (`responses_tools.FREEFORM_INPUT`); arguments of another shape, as they came."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments
    given = value.get(FREEFORM_INPUT) if isinstance(value, dict) else None
    return given if isinstance(given, str) else arguments


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class ResponseShape:
    """The answer as a Response object, whole (`response`) or as the typed events of a
    stream (`ResponseEvents`)."""

    def __init__(self, parsed: ResponsesBody, result: RouteResult, request_id: str) -> None:
        self.parsed = parsed
        self.result = result
        self.key = request_id.replace("-", "")
        self.id = f"resp_{self.key}"
        self.created = int(time.time())
        self.model = result.provider or result.tier
        self.request_id = request_id

    @property
    def failover(self) -> dict[str, Any]:
        """Which tier answered, as the chat endpoint says it."""
        return failover_object(self.result, self.request_id)

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{self.key}",
            "status": status,
            "role": "assistant",
            "content": [_output_text(text)],
        }

    @property
    def reasons(self) -> bool:
        """Whether the answer gives the model's thinking: the request asked for reasoning."""
        return self.parsed.reasoning is not None

    def reasoning(self, text: str, status: str) -> dict[str, Any]:
        summary = [{"type": "summary_text", "text": text}] if self.parsed.summary and text else []
        return {"type": "reasoning", "id": f"rs_{self.key}", "summary": summary, "status": status}

    def call(self, index: int, call_id: str, name: str, arguments: str, status: str) -> Any:
        if name in self.parsed.custom_tools:  # a custom tool's call: its free text
            return {
                "type": "custom_tool_call",
                "id": f"ctc_{self.key}_{index}",
                "call_id": call_id or f"call_{self.key}_{index}",
                "name": name,
                "input": freeform_input(arguments),
            }
        return {
            "type": "function_call",
            "id": f"fc_{self.key}_{index}",
            "call_id": call_id or f"call_{self.key}_{index}",
            "name": name,
            "arguments": arguments,
            "status": status,
        }

    def status(self) -> str:
        return "incomplete" if self.result.finish_reason == "length" else "completed"

    def usage(self) -> dict[str, Any]:
        result = self.result
        return {
            "input_tokens": result.tokens_in,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": result.tokens_out,
            "output_tokens_details": {"reasoning_tokens": 0},  # counted in output_tokens
            "total_tokens": result.tokens_in + result.tokens_out,
        }

    def body(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The Response object; `in_progress` before any output, without usage."""
        parsed, completion = self.parsed, self.parsed.completion
        wanted = completion.output
        output_format: dict[str, Any] = {"type": wanted.kind if wanted else "text"}
        if wanted is not None and wanted.kind == "json_schema":
            output_format.update(name=wanted.name, schema=wanted.schema, strict=wanted.strict)
            if wanted.description:
                output_format["description"] = wanted.description
        choice: Any = parsed.tool_choice or "auto"
        if choice not in ("none", "auto", "required"):
            choice = {"type": "function", "name": choice}
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "instructions": parsed.instructions,
            "max_output_tokens": completion.max_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": parsed.parallel_tool_calls,
            "previous_response_id": None,
            "store": False,
            "metadata": parsed.metadata or {},
            "temperature": completion.temperature,
            "top_p": completion.top_p,
            "text": {"format": output_format},
            "tool_choice": choice,
            **({"reasoning": parsed.reasoning} if parsed.reasoning is not None else {}),
            "tools": [
                {"type": "custom", "name": tool.name, "description": tool.description or None}
                if tool.name in parsed.custom_tools
                else {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description or None,
                    "parameters": tool.parameters,
                    "strict": tool.strict,
                }
                for tool in completion.tools
            ],
            "truncation": "disabled",
        }
        if status != "in_progress":
            body["usage"] = self.usage()
        body["failover"] = self.failover
        return body

    def response(self) -> dict[str, Any]:
        """The whole answer: its text as a message (unless it is tool calls only), then its
        tool calls."""
        result, status = self.result, self.status()
        output = []
        if self.reasons and result.reasoning:
            output.append(self.reasoning(result.reasoning, "completed"))
        if result.text or not result.tool_calls:
            output.append(self.message(result.text, status))
        output += [
            self.call(index, call.id, call.name, call.arguments, "completed")
            for index, call in enumerate(result.tool_calls)
        ]
        return self.body(status, output)


class ResponseEvents:
    """A stream's typed events, numbered in order: the response created and in progress, each
    output item as it starts and grows (a message's text, a call's arguments), each item done,
    then the whole response (`closing`), or an error event (`broken`)."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        self.text_at: int | None = None  # the message's output index, once it has text
        self.thought_at: int | None = None  # the reasoning item's, once the model thought
        self.calls: dict[int, int] = {}  # a streamed call's index → its output index
        # A custom tool's call's arguments as they come (JSON text holding its free text, which
        # is given whole at the call's end).
        self.custom: dict[int, str] = {}

    def _event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": f"response.{kind}" if kind != "error" else kind, **fields}
        body["sequence_number"] = self.sequence
        self.sequence += 1
        data = json.dumps(body, ensure_ascii=False)
        return f"event: {body['type']}\ndata: {data}\n\n".encode()

    def _of(self, kind: str, at: int, **fields: Any) -> bytes:
        """An event of the item at output index `at` (of its text part, for a message)."""
        item = self.items[at]
        part = {"content_index": 0} if item["type"] == "message" else {}
        return self._event(kind, item_id=item["id"], output_index=at, **part, **fields)

    def opening(self) -> list[bytes]:
        body = self.shape.body("in_progress", [])
        return [self._event("created", response=body), self._event("in_progress", response=body)]

    def _added(self, item: dict[str, Any]) -> int:
        self.items.append(item)
        return len(self.items) - 1

    def _thought(self, text: str) -> list[bytes]:
        """A piece of the model's thinking: the reasoning item's summary grows."""
        shape, events = self.shape, []
        if self.thought_at is None:
            item = shape.reasoning("", "in_progress")
            at = self.thought_at = self._added(item)
            events.append(self._event("output_item.added", output_index=at, item=item))
            if shape.parsed.summary:
                item["summary"] = [{"type": "summary_text", "text": ""}]
                events.append(self._summary("reasoning_summary_part.added", part=_summary("")))
        if shape.parsed.summary:
            self.items[self.thought_at]["summary"][0]["text"] += text
            events.append(self._summary("reasoning_summary_text.delta", delta=text))
        return events

    def _summary(self, kind: str, **fields: Any) -> bytes:
        assert self.thought_at is not None
        item = self.items[self.thought_at]
        return self._event(
            kind, item_id=item["id"], output_index=self.thought_at, summary_index=0, **fields
        )

    def piece(self, piece: Piece) -> list[bytes]:
        if isinstance(piece, Reasoning):
            return self._thought(piece.text) if self.shape.reasons and piece.text else []
        if not piece:
            return []
        events = []
        if isinstance(piece, ToolCallDelta):
            at = self.calls.get(piece.index)
            if at is None:
                call = self.shape.call(len(self.calls), piece.id, piece.name, "", "in_progress")
                at = self.calls[piece.index] = self._added(call)
                events.append(self._event("output_item.added", output_index=at, item=call))
            if self.items[at]["type"] == "custom_tool_call":
                self.custom[at] = self.custom.get(at, "") + piece.arguments
            elif piece.arguments:
                self.items[at]["arguments"] += piece.arguments
                events.append(self._of("function_call_arguments.delta", at, delta=piece.arguments))
            return events
        if self.text_at is None:
            message = self.shape.message("", "in_progress")
            at = self.text_at = self._added(message)
            events.append(self._event("output_item.added", output_index=at, item=message))
            events.append(self._of("content_part.added", at, part=_output_text("")))
        self.items[self.text_at]["content"][0]["text"] += piece
        events.append(self._of("output_text.delta", self.text_at, delta=piece, logprobs=[]))
        return events

    def closing(self, result: RouteResult) -> list[bytes]:
        """Each item done, then response.completed (or response.incomplete, cut at the
        token limit) with the whole response, as `result` (the stream's, as it ended) says."""
        self.shape.result = result
        status = self.shape.status()
        events = []
        for at, item in enumerate(self.items):
            if item["type"] == "reasoning":
                item["status"] = "completed"
                if item["summary"]:
                    part = item["summary"][0]
                    events.append(self._summary("reasoning_summary_text.done", text=part["text"]))
                    events.append(self._summary("reasoning_summary_part.done", part=part))
            elif item["type"] == "message":
                item["status"] = status
                part = item["content"][0]
                events.append(self._of("output_text.done", at, text=part["text"], logprobs=[]))
                events.append(self._of("content_part.done", at, part=part))
            elif item["type"] == "custom_tool_call":
                item["input"] = text = freeform_input(self.custom.get(at, ""))
                events.append(self._of("custom_tool_call_input.delta", at, delta=text))
                events.append(self._of("custom_tool_call_input.done", at, input=text))
            else:
                item["status"] = "completed"
                arguments = item["arguments"]
                events.append(
                    self._of(
                        "function_call_arguments.done", at, name=item["name"], arguments=arguments
                    )
                )
            events.append(self._event("output_item.done", output_index=at, item=item))
        response = self.shape.body(status, self.items)
        return [*events, self._event(status, response=response)]

    def broken(self) -> bytes:
        """The event that ends a stream its provider broke off: nothing else is spliced in."""
        return self._event(
            "error",
            code="stream_interrupted",
            message="The provider's answer broke off; it is incomplete.",
            param=None,
        )
