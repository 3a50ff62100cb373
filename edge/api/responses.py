"""`POST /v1/responses`: the text subset of OpenAI's Responses API, through the same cascade as
`/v1/chat/completions`.

The body (`edge/api/responses_request.py`) becomes the same `CompletionRequest` a Chat
Completions request does; `model` is read by `edge.api.models.resolve_model`, as there
(`auto`, a provider's name, a model alias or a model a provider serves). The answer is a
Response object (`edge/api/responses_shapes.py`), whole or streamed as typed server-sent
events (`event: <type>` beside its JSON), errors in OpenAI's error shape, every answer with the
`X-Failover-*` headers. Nothing is stored: a response can't be fetched or continued later.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponseBase

from edge.api.common import (
    failover_headers,
)
from edge.api.json_answer import JsonAnswer
from edge.api.openai_chat import routed_by_model
from edge.api.openai_common import (
    EventStreamResponse,
    arrived,
    ms_since,
    openai_json_errors,
    relay,
    routed_error,
)
from edge.api.responses_request import parse_responses
from edge.api.responses_shapes import ResponseEvents, ResponseShape
from runtime.outcomes import record_call


@openai_json_errors
async def responses(request: HttpRequest) -> HttpResponseBase:
    started = time.perf_counter()
    arrival = await arrived(request, parse_responses)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, parsed = arrival.gateway, arrival.parsed
    found = await routed_by_model(arrival, parsed.completion)
    if isinstance(found, HttpResponseBase):
        return found
    routed, result = found
    request_id = routed.request_id
    headers = failover_headers(result, request_id)
    if result.error is not None:
        record_call(gateway, routed, result, ms_since(started))
        return routed_error(result, headers)
    shape = ResponseShape(parsed, result, request_id)
    if parsed.stream:
        events = relay(ResponseEvents(shape), gateway, routed, result, started)
        return EventStreamResponse(events, headers=headers)
    record_call(gateway, routed, result, ms_since(started))
    return JsonAnswer(shape.response(), headers=headers)
