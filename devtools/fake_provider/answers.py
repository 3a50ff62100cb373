"""The fake provider's answer to a call that passed its faults: the chat answer in each dialect
(plain text, a tool call, a tool result's echo, structured output, a description of the images,
each after the thinking when the request asks for it), Ollama's other endpoints and the
embeddings, or the error a real provider answers instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from devtools.fake_provider import (
    anthropic_thinking,
    dialects,
    embeddings,
    images,
    ollama_extra,
    text_replies,
    thinking,
    tool_replies,
    tools,
)
from devtools.fake_provider.chat_request import chat_limit, wants_stream
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, Reply
from devtools.fake_provider.disobey import disobeyed


def answer(dialect: str, endpoint: str, config: FakeConfig, request: dict[str, Any]) -> Reply:
    if endpoint == "tags":
        return dialects.ollama_tags(config)
    if endpoint == "ps":
        return dialects.ollama_ps(config)
    if endpoint == "version":
        return dialects.json_reply(200, {"version": "0.0.0-fake"})
    if endpoint == "root":
        return Reply(200, b"text/plain; charset=utf-8", (b"Ollama is running",))
    if endpoint == "models":
        return dialects.openai_models(config)
    if endpoint == "show":
        return ollama_extra.show(config, request)
    if endpoint == "embed":
        if dialect == OLLAMA:
            return embeddings.ollama_embed(config, request)
        return embeddings.openai_embeddings(config, request)
    if endpoint == "generate":
        return ollama_extra.generate(config, request)
    return chat(dialect, config, request)


def chat(dialect: str, config: FakeConfig, request: dict[str, Any]) -> Reply:
    model = request["model"]
    if model not in config.models:
        return dialects.error(dialect, "model_not_found", model=model)
    seen = images.read(dialect, request)
    if isinstance(seen, Reply):
        return seen
    if seen and not config.supports_vision(model):
        return images.refusal(dialect, model, seen[0])
    described = images.describe(seen) if seen and config.describe_images else None
    prompt_tokens = dialects.count_words(request["messages"])
    stream = wants_stream(dialect, request)
    limit = chat_limit(dialect, request)
    if dialect == OLLAMA:
        return ollama_extra.chat(
            config,
            request,
            prompt_tokens=prompt_tokens,
            limit=limit,
            stream=stream,
            described=described,
        )
    if dialect == ANTHROPIC:
        return _anthropic(config, request, prompt_tokens, limit, stream, described)
    reasons = thinking.openai_reasons(request, config)
    if isinstance(reasons, Reply):
        return reasons
    planned = disobeyed(tools.plan(dialect, request, config, described=described), config)
    if isinstance(planned, Reply):
        return planned
    if isinstance(planned, str):
        config = replace(config, text=planned)
    options = request.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if isinstance(planned, tools.ToolCall):
        reply = tool_replies.openai_tool_call(
            planned,
            model=model,
            prompt_tokens=prompt_tokens,
            stream=stream,
            include_usage=include_usage,
        )
    else:
        reply = text_replies.openai_chat(
            config,
            model=model,
            prompt_tokens=prompt_tokens,
            limit=limit,
            stream=stream,
            include_usage=include_usage,
        )
    return thinking.with_reasoning_content(reply) if reasons else reply


def _anthropic(
    config: FakeConfig,
    request: dict[str, Any],
    prompt_tokens: int,
    limit: int | None,
    stream: bool,
    described: str | None,
) -> Reply:
    model = request["model"]
    system = request.get("system")
    if isinstance(system, str):
        prompt_tokens += len(system.split())
    thought = anthropic_thinking.read(request, config)
    if isinstance(thought, Reply):
        return thought
    planned = disobeyed(tools.plan(ANTHROPIC, request, config, described=described), config)
    if isinstance(planned, Reply):
        return planned
    if isinstance(planned, tools.ToolCall):
        reply = tool_replies.anthropic_tool_use(
            planned, model=model, prompt_tokens=prompt_tokens, stream=stream
        )
    else:
        if isinstance(planned, str):
            config = replace(config, text=planned)
        reply = text_replies.anthropic_messages(
            config, model=model, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    if thought is None:
        return reply
    return anthropic_thinking.with_thinking(reply, thought, config.signature_key)
