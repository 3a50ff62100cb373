"""Credentials out of upstream text, before anything downstream sees it.

What a provider says when it fails (an error body, a stream's error event, a transport error)
may quote the request's own key back: some servers echo the Authorization header, a proxy in
front of one may print the whole request. The adapter scrubs that text at its one seam
(`ProviderAdapter._failed`), so the ledger, the logs, the health checks, the control room and
the alerts only ever hold the scrubbed words, and the API's callers get none of them at all.

The key in use goes first, wherever it appears; then anything shaped like a credential.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable

REDACTED = "[redacted]"

# A secret shorter than this is not looked for literally: replacing every "ab" would garble
# the message and hide nothing worth hiding.
MIN_SECRET_LENGTH = 6

# What a credential's value may be made of, up to where it ends in a header, JSON or a query.
_VALUE = r"""[^\s"'&,;)}\[\]]"""
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A named value in a query string or a form: api_key=…, key=…, token=…, password=….
    (
        re.compile(
            r"(?i)\b((?:api[-_]?key|access[-_]?token|auth[-_]?token|token|key|secret|password|"
            rf"signature|sig)=){_VALUE}{{4,}}"
        ),
        rf"\1{REDACTED}",
    ),
    # A named value in a header or JSON: "x-api-key": "…", Authorization: …, "password": "…"
    # (the scheme of "Authorization: Bearer …" is left for the next pattern).
    (
        re.compile(
            r"(?i)\b((?:x-)?(?:api[-_]?key|access[-_]?token|auth[-_]?token|authorization|secret|"
            r"password)[\"']?\s*:\s*[\"']?)(?!(?:bearer|basic)\s)"
            rf"{_VALUE}{{4,}}"
        ),
        rf"\1{REDACTED}",
    ),
    # An Authorization header's credentials: "Bearer sk-…", "Basic dXNlcjpwYXNz" (a word after
    # "bearer" in a sentence is all letters: it stays).
    (
        re.compile(r"(?i)\b(bearer|basic)(\s+)(?=[A-Za-z]*[^A-Za-z\s])[A-Za-z0-9._~+/=-]{8,}"),
        rf"\1\2{REDACTED}",
    ),
    # Keys in the shape OpenAI, Anthropic and others give them: sk-…, sk-ant-…, sk-proj-….
    (re.compile(r"\b(?:sk|rk|pk)[-_][A-Za-z0-9_-]{6,}"), REDACTED),
    # A long run of key characters mixing letters and digits: a key in no known shape, a token.
    (
        re.compile(
            r"(?<![A-Za-z0-9_+/=-])(?=[A-Za-z_+/=-]*[0-9])(?=[0-9_+/=-]*[A-Za-z])"
            r"[A-Za-z0-9_+/=-]{32,}"
        ),
        REDACTED,
    ),
)


# Characters a key is written with: what a cut through one leaves at the end of the kept part.
_PARTIAL_TOKEN = re.compile(r"[A-Za-z0-9_+/=.~-]+$")


def scrub_cut(text: str, limit: int, secrets: Iterable[str] = (), *, head: int = 8192) -> str:
    """The first `head` characters of `text`, scrubbed, then cut to `limit`. Where `head` cut
    through a word (it could be a key, which the scrubber no longer knows by halves), the
    word's kept part goes too."""
    kept = text[:head]
    if len(text) > head:
        kept = _PARTIAL_TOKEN.sub("", kept)
    return scrub(kept, secrets)[:limit]


def scrubbed_traceback(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """The exception's traceback as a log line would show it, scrubbed: its message may quote
    an upstream's words."""
    return scrub("".join(traceback.format_exception(exc)).rstrip(), tuple(secrets))


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each of `secrets` and everything shaped like a credential replaced by
    `[redacted]`."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
