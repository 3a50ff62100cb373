"""Anthropic's Messages API as a front door: `POST /v1/messages` and
`POST /v1/messages/count_tokens`.

Clients and agents built on the `anthropic` SDK point their base URL at the gateway (the key
as `x-api-key`, or as a bearer token) and gain the cascade unchanged: the same keys, limits,
breakers, budgets and ledger, whichever provider answers (Ollama, an OpenAI-compatible one or
Anthropic itself). The body (`edge/api/anthropic/request.py`) becomes the same
`CompletionRequest` a Chat Completions request does, `model` read by
`edge.api.models.resolve_model`; the answer is a message (`edge/api/anthropic/shapes.py`),
whole or streamed as Anthropic's typed events; every error is in Anthropic's error shape; every
answer carries the `X-Failover-*` headers. The static tier and the degradation message answer
as messages too, as the client app's stand-ins allow.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from django.http import HttpRequest, HttpResponseBase

from edge.api.anthropic.request import MessagesBody, parse_count_body, parse_messages_body
from edge.api.anthropic.shapes import MessageEvents, MessageShape, anthropic_error
from edge.api.arrival import arrived as arrive
from edge.api.arrival import json_errors
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.api.models import resolve_model
from edge.api.pipeline import Door, served
from edge.api.turned_away import refused
from gateway.adapters.messages import CompletionRequest, estimate_tokens, prompt_needed
from gateway.engine import codec
from gateway.routing.result import RouteResult

anthropic_json_errors = functools.partial(json_errors, render=anthropic_error)
# Beta names are short words, digits and dashes; a header holds a few dozen at most.
BETA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_BETAS = 64


def in_anthropics_words(result: RouteResult) -> RouteResult:
    """A routed error as Anthropic words it where a client reads the words: a request over the
    context window says its numbers as Anthropic does (`input length and max_tokens exceed
    context limit: P + M > W`), which Claude Code reads to ask again with a smaller
    max_tokens."""
    error = result.error
    if error is None or error.context is None:
        return result
    prompt, answer, window = error.context
    message = (
        f"input length and `max_tokens` exceed context limit: {prompt} + {answer} > {window}, "
        "decrease input length or `max_tokens` and try again"
    )
    return replace(result, error=replace(error, message=message, param=""))


def with_betas(completion: CompletionRequest, request: HttpRequest) -> CompletionRequest:
    """The request with the `anthropic-beta` header's values (Claude Code sends several),
    carried to an Anthropic provider and dropped for the rest. A value that isn't a beta's
    name is left out."""
    header = request.headers.get("anthropic-beta", "")
    if not header:
        return completion
    betas = tuple(
        dict.fromkeys(
            value for value in (part.strip() for part in header.split(",")) if BETA.fullmatch(value)
        )
    )[:MAX_BETAS]
    if not betas:
        return completion
    return replace(completion, options=(*completion.options, ("anthropic_beta", betas)))


def shape(parsed: MessagesBody, result: RouteResult, request_id: str) -> MessageShape:
    thinking = parsed.completion.thinking
    return MessageShape(result, request_id, thinking=bool(thinking and thinking.on))


MESSAGES = Door(
    parse=parse_messages_body,
    ask=lambda parsed, request: with_betas(parsed.completion, request),
    whole=lambda parsed, result, request_id: shape(parsed, result, request_id).message(),
    frames=lambda parsed, result, request_id: MessageEvents(shape(parsed, result, request_id)),
    render=anthropic_error,
    worded=in_anthropics_words,
)


@anthropic_json_errors
async def messages(request: HttpRequest) -> HttpResponseBase:
    return await served(MESSAGES, request)


@anthropic_json_errors
async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    """The conversation's input tokens, by the gateway's estimate (about four characters a
    token, as its budgets and context windows count them): no provider is asked."""
    arrival = await arrive(request, parse_count_body, anthropic_error)
    if isinstance(arrival, HttpResponseBase):
        return arrival
    gateway, caller, parsed = arrival.gateway, arrival.caller, arrival.parsed
    choice = resolve_model(caller, await gateway.snapshots.current(), parsed.model)
    if isinstance(choice, ApiError):
        return refused(choice, anthropic_error, request, caller, arrival.body)
    completion = parsed.completion
    tools = sum(
        estimate_tokens(f"{tool.name} {tool.description} {codec.dumps_text(tool.parameters)}")
        for tool in completion.tools
    )
    return JsonAnswer({"input_tokens": prompt_needed(completion) + tools})
