"""`POST /v1/responses`: the text subset of OpenAI's Responses API, through the same cascade as
`/v1/chat/completions`.

The body (`edge/api/openai/responses_request.py`) becomes the same `CompletionRequest` a Chat
Completions request does; `model` is read by `edge.api.models.resolve_model`, as there
(`auto`, a provider's name, a model alias or a model a provider serves). The answer is a
Response object (`edge/api/openai/responses_shapes.py`), whole or streamed as typed server-sent
events (`event: <type>` beside its JSON), errors in OpenAI's error shape, every answer with the
`X-Failover-*` headers. Nothing is stored: a response can't be fetched or continued later.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase

from edge.api.openai.errors import openai_error, openai_json_errors
from edge.api.openai.responses_request import ResponsesBody, parse_responses
from edge.api.openai.responses_shapes import ResponseEvents, ResponseShape
from edge.api.pipeline import Door, served
from gateway.adapters.messages import CompletionRequest
from gateway.routing.cascade import RouteResult


def asked(parsed: ResponsesBody, request: HttpRequest) -> CompletionRequest:
    return parsed.completion


def whole(parsed: ResponsesBody, result: RouteResult, request_id: str) -> dict[str, Any]:
    return ResponseShape(parsed, result, request_id).response()


def frames(parsed: ResponsesBody, result: RouteResult, request_id: str) -> ResponseEvents:
    return ResponseEvents(ResponseShape(parsed, result, request_id))


RESPONSES = Door(parse=parse_responses, ask=asked, whole=whole, frames=frames, render=openai_error)


@openai_json_errors
async def responses(request: HttpRequest) -> HttpResponseBase:
    return await served(RESPONSES, request)
