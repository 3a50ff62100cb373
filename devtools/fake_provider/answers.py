"""The fake provider's answer to a call that passed its faults: the chat answer in each dialect
(plain text, a tool call, a tool result's echo, structured output), Ollama's other endpoints and
the embeddings, or the error a real provider answers instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from devtools.fake_provider import dialects, embeddings, ollama_extra, tool_replies, tools
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
    prompt_tokens = dialects.count_words(request["messages"])
    stream = wants_stream(dialect, request)
    limit = chat_limit(dialect, request)
    if dialect == OLLAMA:
        return ollama_extra.chat(
            config, request, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    if dialect == ANTHROPIC:
        system = request.get("system")
        if isinstance(system, str):
            prompt_tokens += len(system.split())
    planned = disobeyed(tools.plan(dialect, request, config), config)
    if isinstance(planned, Reply):
        return planned
    if isinstance(planned, str):
        config = replace(config, text=planned)
    if dialect == ANTHROPIC:
        if isinstance(planned, tools.ToolCall):
            return tool_replies.anthropic_tool_use(
                planned, model=model, prompt_tokens=prompt_tokens, stream=stream
            )
        return dialects.anthropic_messages(
            config, model=model, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    options = request.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if isinstance(planned, tools.ToolCall):
        return tool_replies.openai_tool_call(
            planned,
            model=model,
            prompt_tokens=prompt_tokens,
            stream=stream,
            include_usage=include_usage,
        )
    return dialects.openai_chat(
        config,
        model=model,
        prompt_tokens=prompt_tokens,
        limit=limit,
        stream=stream,
        include_usage=include_usage,
    )
