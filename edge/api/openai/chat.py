"""The OpenAI-compatible endpoint `POST /v1/chat/completions` (the model list is in
`edge/api/models.py`).

Existing OpenAI SDKs and tools point their base URL here and gain the cascade unchanged. The
request is a Chat Completions request; `model` is `auto` (the cascade), a provider's name
(that provider first, then the cascade), a model alias's name (its providers and models in
turn) or a model a provider serves (every provider serving it, then the cascade), as
`edge.api.models.resolve_model` reads it. Answers come in OpenAI's shapes,
whole or streamed as server-sent events ending with `data: [DONE]`, and errors in OpenAI's
error shape. The gateway's own fields (`priority`, `task`, `allow_cloud`, `cache`) may ride
along as extra body fields, and every answer carries the `X-Failover-*` headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from edge.api.openai.chat_request import ChatBody, parse_chat
from edge.api.openai.errors import openai_error, openai_json_errors
from edge.api.openai.shapes import BROKEN, DONE, Shape, delta
from edge.api.pipeline import Door, served
from gateway.adapters.messages import CompletionRequest, Piece
from gateway.routing.cascade import RouteResult


def asked(parsed: ChatBody, request: HttpRequest) -> CompletionRequest:
    return CompletionRequest(
        prompt=parsed.prompt,
        system_prompt=parsed.system_prompt,
        history=parsed.history,
        max_tokens=parsed.max_tokens,
        temperature=parsed.temperature,
        top_p=parsed.top_p,
        stop=parsed.stop,
        turns=parsed.turns,
        tools=parsed.tools,
        tool_choice=parsed.tool_choice,
        output=parsed.output,
        options=parsed.options,
        thinking=parsed.thinking,
    )


def whole(parsed: ChatBody, result: RouteResult, request_id: str) -> dict[str, Any]:
    return Shape(parsed, result, request_id).completion()


def frames(parsed: ChatBody, result: RouteResult, request_id: str) -> ChatFrames:
    return ChatFrames(Shape(parsed, result, request_id))


CHAT = Door(parse=parse_chat, ask=asked, whole=whole, frames=frames, render=openai_error)


@openai_json_errors
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await served(CHAT, request)


class ChatFrames:
    """A chat stream's chunks: the role (with the failover object), a chunk a piece, then the
    finish, the usage if asked, `[DONE]`; a broken one ends with an error event instead."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    def opening(self) -> Iterable[bytes]:
        return [self.shape.chunk({"role": "assistant", "content": ""}, failover=True)]

    def piece(self, piece: Piece) -> Iterable[bytes]:
        return [self.shape.chunk(delta(piece))]

    def broken(self) -> bytes:
        return BROKEN

    def closing(self, result: RouteResult) -> Iterable[bytes]:
        shape = self.shape
        shape.result = result  # the stream's result as it ended: its finish and usage
        yield shape.chunk({}, result.finish_reason)
        if shape.parsed.include_usage:
            yield shape.usage_chunk()
        yield DONE
