"""Ollama as it really behaves beyond the plain chat: thinking, tool support per model, /api/show
and /api/generate.

A model in the config's `thinking_models` thinks unless the request says `think: false` (Ollama
thinks by default for the models that can): its answer carries `thinking` (THINKING_TEXT),
streamed as thinking chunks with empty content before the content chunks. `think` is true,
false or a level ("low", "medium", "high", "max", as the reference says); true or a level to any
other model is a 400, and so are tools to a model not in `tool_models` (when that is set), in
Ollama's own words. A message may carry back its `thinking` (a string, as Ollama's Go struct
takes it) and `images` (`images`).

A prompt longer than `context_length` words is answered anyway: Ollama truncates the prompt to
its context window silently, keeping the end (only /api/embed with truncate false refuses).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from devtools.fake_provider import dialects, text_replies, tool_replies, tools
from devtools.fake_provider.chat_request import chat_limit, wants_stream
from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import NDJSON, OLLAMA, Reply, dumps, json_reply
from devtools.fake_provider.disobey import disobeyed
from devtools.fake_provider.thinking import THINKING_TEXT, pieces

_THINK_LEVELS = ("low", "medium", "high", "max")


def thinks(config: FakeConfig, request: dict[str, Any]) -> bool | Reply:
    """Whether the model thinks for this request, or Ollama's 400."""
    model, think = request["model"], request.get("think")
    wanted = think is True or think in _THINK_LEVELS
    if think is not None and not wanted and think is not False:
        return json_reply(400, {"error": f"invalid think value: {json.dumps(think)}"})
    if model not in config.thinking_models:
        if wanted:
            return json_reply(400, {"error": f'"{model}" does not support thinking'})
        return False
    return think is not False


def with_thinking(reply: Reply, *, key: str | None = "message") -> Reply:
    """The reply with THINKING_TEXT added: in `message` (chat) or at the top (generate, key
    None); streamed, as thinking chunks (empty content) before the first chunk."""
    if not reply.stream:
        body = json.loads(reply.chunks[0])
        (body[key] if key else body)["thinking"] = THINKING_TEXT
        return json_reply(reply.status, body, reply.headers)
    first = json.loads(reply.chunks[0])
    chunks = []
    for piece in pieces():
        line: dict[str, Any] = {"model": first["model"], "created_at": first["created_at"]}
        if key:
            line[key] = {"role": "assistant", "content": "", "thinking": piece}
        else:
            line.update(response="", thinking=piece)
        line["done"] = False
        chunks.append(dumps(line) + b"\n")
    return Reply(200, NDJSON, [*chunks, *reply.chunks], stream=True, headers=reply.headers)


def chat(
    config: FakeConfig,
    request: dict[str, Any],
    *,
    prompt_tokens: int,
    limit: int | None,
    stream: bool,
    described: str | None = None,
) -> Reply:
    model = request["model"]
    for message in request["messages"]:
        carried = message.get("thinking") if isinstance(message, dict) else None
        if carried is not None and not isinstance(carried, str):
            return dialects.ollama_unmarshal_error(carried, "thinking", "string")
    if request.get("tools") and not config.supports_tools(model):
        return json_reply(
            400, {"error": f"registry.ollama.ai/library/{model} does not support tools"}
        )
    thinking = thinks(config, request)
    if isinstance(thinking, Reply):
        return thinking
    planned = disobeyed(tools.plan(OLLAMA, request, config, described=described), config)
    if isinstance(planned, Reply):
        return planned
    if isinstance(planned, tools.ToolCall):
        reply = tool_replies.ollama_tool_call(
            planned,
            model=model,
            created_at=dialects.now_rfc3339(),
            prompt_tokens=prompt_tokens,
            stream=stream,
        )
    else:
        if isinstance(planned, str):
            config = replace(config, text=planned)
        reply = text_replies.ollama_chat(
            config, model=model, prompt_tokens=prompt_tokens, limit=limit, stream=stream
        )
    return with_thinking(reply) if thinking else reply


def generate(config: FakeConfig, request: dict[str, Any]) -> Reply:
    """/api/generate: the chat answer to `system` + `prompt` in generate's shape (`response`
    instead of `message`); an empty prompt loads (or, with keep_alive 0, unloads) the model."""
    model = request["model"]
    if model not in config.models:
        return dialects.error(OLLAMA, "model_not_found", model=model)
    prompt = request.get("prompt") or ""
    if not prompt:
        reason = "unload" if request.get("keep_alive") in (0, "0", "0s") else "load"
        body = {
            "model": model,
            "created_at": dialects.now_rfc3339(),
            "response": "",
            "done": True,
            "done_reason": reason,
        }
        return json_reply(200, body)
    thinking = thinks(config, request)
    if isinstance(thinking, Reply):
        return thinking
    planned = tools.ollama_format(request.get("format"), config)
    if isinstance(planned, Reply):
        return planned
    if isinstance(planned, str):
        config = replace(config, text=planned)
    system = request.get("system") if isinstance(request.get("system"), str) else ""
    words = len(prompt.split()) + len(str(system).split())
    stream = wants_stream(OLLAMA, request)
    chat_reply = text_replies.ollama_chat(
        config, model=model, prompt_tokens=words, limit=chat_limit(OLLAMA, request), stream=stream
    )
    lines = []
    for chunk in chat_reply.chunks:
        line = {
            ("response" if name == "message" else name): value["content"]
            if name == "message"
            else value
            for name, value in json.loads(chunk).items()
        }
        if line["done"]:
            line["context"] = [1, 2, 3]
        lines.append(dumps(line) + (b"\n" if stream else b""))
    reply = Reply(200, NDJSON if stream else dialects.JSON, lines, stream=stream)
    return with_thinking(reply, key=None) if thinking else reply


def show(config: FakeConfig, request: dict[str, Any]) -> Reply:
    """/api/show: the model's modelfile, parameters, template, details, model_info (its context
    length) and capabilities."""
    name = request.get("model") or request.get("name")
    if name not in config.models and name not in config.embedding_models:
        return json_reply(404, {"error": f"model '{name}' not found"})
    name = str(name)
    tag = dialects._ollama_model(name)
    family = tag["details"]["family"]
    if name in config.embedding_models:
        capabilities = ["embedding"]
    else:
        capabilities = ["completion"]
        if config.supports_tools(name):
            capabilities.append("tools")
        if config.supports_vision(name):
            capabilities.append("vision")
        if name in config.thinking_models:
            capabilities.append("thinking")
    template = "{{ if .System }}{{ .System }}\n{{ end }}{{ .Prompt }}"
    modelfile = (
        '# Modelfile generated by "ollama show"\n'
        "# To build a new Modelfile based on this one, replace the FROM line with:\n"
        f"# FROM {name}\n\n"
        f"FROM /root/.ollama/models/blobs/sha256-{tag['digest']}\n"
        f'TEMPLATE """{template}"""\n'
        f"PARAMETER num_ctx {config.context_length}\n"
    )
    body = {
        "modelfile": modelfile,
        "parameters": f"num_ctx                        {config.context_length}",
        "template": template,
        "details": tag["details"],
        "model_info": {
            "general.architecture": family,
            "general.file_type": 15,
            "general.parameter_count": 8_030_261_248,
            "general.quantization_version": 2,
            f"{family}.context_length": config.context_length,
            f"{family}.embedding_length": config.embedding_dimensions,
        },
        "capabilities": capabilities,
        "modified_at": tag["modified_at"],
    }
    return json_reply(200, body)


def with_load_duration(reply: Reply, seconds: float) -> Reply:
    """The reply with its done line saying the call waited `seconds` for the model's load
    (`load_duration`, and so `total_duration`, in nanoseconds), as Ollama's answer after a
    load does."""
    load_ns = round(seconds * 1e9)
    chunks = []
    for chunk in reply.chunks:
        try:
            line = json.loads(chunk)
        except ValueError:
            line = None
        if isinstance(line, dict) and line.get("done") is True:
            line["total_duration"] = int(line.get("total_duration") or 0) + load_ns
            line["load_duration"] = load_ns
            chunk = dumps(line) + (b"\n" if chunk.endswith(b"\n") else b"")
        chunks.append(chunk)
    return replace(reply, chunks=chunks)
