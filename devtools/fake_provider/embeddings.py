"""The fake provider's embeddings: Ollama's POST /api/embed and OpenAI's POST /v1/embeddings.

A vector is deterministic from its text: drawn from a generator seeded with the text's SHA-256,
`dimensions` long (the request's, else the config's `embedding_dimensions`), normalized to unit
length. Only the config's `embedding_models` embed; any other model is the dialect's 404.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
from typing import Any

from devtools.fake_provider import dialects
from devtools.fake_provider.config import MAX_EMBEDDING_DIMENSIONS, FakeConfig
from devtools.fake_provider.dialects import OLLAMA, OPENAI, Reply


def vector(text: str, dimensions: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(value * value for value in values)) or 1.0
    return [value / norm for value in values]


def _dimensions(config: FakeConfig, request: dict[str, Any]) -> int | None:
    """The request's dimensions (None when invalid), else the config's."""
    value = request.get("dimensions")
    if value is None:
        return config.embedding_dimensions
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_EMBEDDING_DIMENSIONS else None


def ollama_embed(config: FakeConfig, request: dict[str, Any]) -> Reply:
    model = request["model"]
    if model not in config.embedding_models:
        return dialects.error(OLLAMA, "model_not_found", model=model)
    texts = request.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        return dialects.json_reply(400, {"error": "invalid input type"})
    dimensions = _dimensions(config, request)
    if dimensions is None:
        return dialects.json_reply(400, {"error": "invalid dimensions"})
    words = [len(text.split()) for text in texts]
    if request.get("truncate") is False and any(n > config.context_length for n in words):
        return dialects.json_reply(400, {"error": "input length exceeds the context length"})
    prompt_tokens = sum(min(n, config.context_length) for n in words)
    prompt_ns, load_ns = 100_000 * prompt_tokens, 1_000_000
    return dialects.json_reply(
        200,
        {
            "model": model,
            "embeddings": [vector(text, dimensions) for text in texts],
            "total_duration": load_ns + prompt_ns,
            "load_duration": load_ns,
            "prompt_eval_count": prompt_tokens,
        },
    )


def _openai_inputs(value: Any) -> list[tuple[str, int]] | None:
    """Each input's seed text and token count: a string, strings, a token array or arrays."""

    def tokens(item: Any) -> bool:
        return (
            isinstance(item, list)
            and bool(item)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
        )

    if isinstance(value, str) or tokens(value):
        value = [value]
    if not isinstance(value, list) or not value:
        return None
    inputs = []
    for item in value:
        if isinstance(item, str) and item:
            inputs.append((item, len(item.split())))
        elif tokens(item):
            inputs.append((" ".join(map(str, item)), len(item)))
        else:
            return None
    return inputs


def openai_embeddings(config: FakeConfig, request: dict[str, Any]) -> Reply:
    model = request["model"]
    inputs = _openai_inputs(request.get("input"))
    if inputs is None:
        message = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
        return dialects.error(OPENAI, "bad_request", message=message, param="input")
    encoding = request.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        message = f"Invalid value: '{encoding}'. Supported values are: 'float' and 'base64'."
        return dialects.error(OPENAI, "bad_request", message=message, param="encoding_format")
    dimensions = _dimensions(config, request)
    if dimensions is None:
        message = "Invalid value for 'dimensions': expected an integer of at least 1."
        return dialects.error(OPENAI, "bad_request", message=message, param="dimensions")
    if model not in config.embedding_models:
        return dialects.error(OPENAI, "model_not_found", model=model)
    data = []
    for index, (text, _) in enumerate(inputs):
        values: Any = vector(text, dimensions)
        if encoding == "base64":
            values = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": values})
    prompt_tokens = sum(count for _, count in inputs)
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return dialects.json_reply(
        200, {"object": "list", "data": data, "model": model, "usage": usage}
    )
