#!/usr/bin/env python3
"""A streamed answer's cost per piece inside the gateway, for a provider with no secret, one
and two: `CompletionStream.next_text` over an OpenAI-compatible stream that arrives one event a
chunk (each line read, decoded, its piece noted and, where the provider has secrets, watched
for them: "read"), and over pieces already decoded (what noting and watching a piece costs
alone: "noted").

    .venv/bin/python bench/stream_pieces.py
    taskset -c 2 .venv/bin/python bench/stream_pieces.py --pieces 50000 --rounds 15

No network and no server: the figure is the process's own work per piece, the best of
`--rounds` runs (the least disturbed by the machine). Run it from another checkout's root to
compare commits (the secrets are given the same way; a tree without the watch ignores them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

import httpx  # noqa: E402

from gateway.adapters import ADAPTERS  # noqa: E402
from gateway.adapters.messages import CompletionRequest  # noqa: E402
from gateway.engine.config import ProviderConfig  # noqa: E402

KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
TOKEN = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
# English-like text in pieces of about four characters, as a model's tokens come.
PROSE = (
    "The gateway relays each piece of the answer as it arrives, so the client sees the text "
    "grow word by word while the provider is still writing the rest of it. "
)


def events(pieces: int) -> list[bytes]:
    words = [PROSE[i : i + 4] for i in range(0, len(PROSE), 4)]
    lines = []
    for n in range(pieces):
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": words[n % len(words)]}}],
        }
        lines.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    lines.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    lines.append(b"data: [DONE]\n\n")
    return lines


def texts(pieces: int) -> list[str]:
    words = [PROSE[i : i + 4] for i in range(0, len(PROSE), 4)]
    return [words[n % len(words)] for n in range(pieces)]


async def arriving(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def per_piece_us(secrets: tuple[str, ...], pieces: int, rounds: int) -> tuple[float, float]:
    """The best time a piece took, read from the upstream's events and already decoded (µs)."""
    config = ProviderConfig(
        name="bench",
        kind="openai",
        base_url="http://127.0.0.1:9",
        model="m",
        priority=1,
        is_local=False,
        timeout_s=5,
        context_window=8192,
        api_key=secrets[0] if secrets else "",
        other_secrets=secrets[1:],
    )
    chunks, decoded = events(pieces), texts(pieces)
    read = noted = float("inf")
    async with httpx.AsyncClient() as client:
        adapter = ADAPTERS["openai"](config, client)
        request = CompletionRequest(prompt="Say hello.")
        for _ in range(rounds):
            response = httpx.Response(200, content=arriving(chunks))
            stream = adapter.stream_over(request, response, 5.0, 0.0)
            started = time.perf_counter()
            while await stream.next_text(1e12, "too slow") is not None:
                pass
            read = min(read, (time.perf_counter() - started) / pieces)
            assert len(stream.text) == len("".join(decoded)), len(stream.text)

            stream = adapter.stream_over(request, httpx.Response(200, content=b""), 5.0, 0.0)
            stream.queued.extend(decoded)
            stream.finish_reason = "stop"
            started = time.perf_counter()
            while await stream.next_text(1e12, "too slow") is not None:
                pass
            noted = min(noted, (time.perf_counter() - started) / pieces)
    return read * 1e6, noted * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split(".")[0])
    parser.add_argument("--pieces", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"{'':<12} {'read':>8} {'noted':>8}   (µs a piece)")
    for label, secrets in (("no secret", ()), ("one secret", (KEY,)), ("two", (KEY, TOKEN))):
        read, noted = asyncio.run(per_piece_us(secrets, args.pieces, args.rounds))
        print(f"{label:<12} {read:8.2f} {noted:8.2f}")


if __name__ == "__main__":
    main()
