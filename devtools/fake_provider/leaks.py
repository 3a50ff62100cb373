"""The careless upstream: errors that quote the request's credentials back, and a stream that
breaks with an error event after its first text.

Real servers (and proxies in front of them) do both: an error page that prints the request's
headers, an OpenAI-compatible server that says "invalid key: sk-…", an error event in the
middle of a stream. With `echo_key` on, every error the fake answers ends with the credential
the request carried, so a test can check that none of it gets past the gateway.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from urllib.parse import quote

from devtools.fake_provider.dialects import ANTHROPIC, OLLAMA, Reply, dumps

# The headers a provider's key travels in: OpenAI's bearer token, Anthropic's x-api-key.
_CREDENTIAL_HEADERS = (b"authorization", b"x-api-key")


def credentials_of(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """What the request carried as its credentials, as a careless server would print it:
    the header, then its key in every shape a leak takes (each half alone, spelt out with
    spaces, in base64, URL-encoded), so a test sees that no piece of it gets past."""
    found = [
        f"{name.decode('latin-1')}: {value.decode('latin-1')}{_pieces(value)}"
        for name, value in headers
        if name.lower() in _CREDENTIAL_HEADERS
    ]
    return "; ".join(found) or "no credentials"


def _pieces(value: bytes) -> str:
    key = value.decode("latin-1").split(" ")[-1]  # "Bearer sk-…": the key alone
    half = len(key) // 2
    spaced = " ".join(key[i : i + 4] for i in range(0, len(key), 4))
    return (
        f" [its halves {key[:half]} … {key[half:]}; spaced out: {spaced}; in base64: "
        f"{base64.b64encode(value).decode()}; URL-encoded: {quote(key, safe='')}]"
    )


def echoing(reply: Reply, credentials: str) -> Reply:
    """An error reply whose message ends with the request's credentials (others unchanged)."""
    if not credentials or reply.status < 400 or reply.stream:
        return reply
    try:
        body = json.loads(reply.chunks[0])
    except ValueError:
        return reply
    error = body.get("error") if isinstance(body, dict) else None
    suffix = f" (the request carried {credentials})"
    if isinstance(error, dict):
        error["message"] = f"{error.get('message') or ''}{suffix}"
    elif isinstance(error, str):
        body["error"] = error + suffix
    else:
        return reply
    return Reply(reply.status, reply.content_type, (dumps(body),), headers=reply.headers)


def broken_stream(dialect: str, reply: Reply, credentials: str, *, after: int = 0) -> Reply:
    """A streamed answer cut after its first text (or its first `after` chunks) by the
    dialect's error event, whose message carries the request's credentials when they are
    given."""
    message = "The model crashed mid-answer."
    if credentials:
        message += f" (the request carried {credentials})"
    if dialect == OLLAMA:
        kept, tail = reply.chunks[:1], dumps({"error": message}) + b"\n"
    elif dialect == ANTHROPIC:
        # message_start, content_block_start, ping, then the first text delta.
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        kept, tail = reply.chunks[:4], b"event: error\ndata: " + dumps(error) + b"\n\n"
    else:
        error = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        kept, tail = reply.chunks[:1], b"data: " + dumps(error) + b"\n\n"
    if after:
        kept = reply.chunks[:after]
    return Reply(
        200,
        reply.content_type,
        [*kept, tail],
        stream=True,
        headers=reply.headers,
        separator=reply.separator,
    )
