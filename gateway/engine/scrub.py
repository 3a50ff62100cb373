"""Credentials out of upstream text, before anything downstream sees it.

What a provider says when it fails (an error body, a stream's error event, a transport error)
may quote the request's own key back: some servers echo the Authorization header, a proxy in
front of one may print the whole request. The adapter scrubs that text at its one seam
(`ProviderAdapter._failed`), so the ledger, the logs, the health checks, the control room and
the alerts only ever hold the scrubbed words, and the API's callers get none of them at all.

Every secret the process can send goes first (the caller passes them: the key in use, the
other providers' keys, the channels' tokens), and not only whole: any run of `PIECE` or more of
its characters, even split by spaces or punctuation, and the same of its base64 and URL-encoded
forms, so half a key, or one spelt out with spaces between its letters, is as gone as the whole.
Then anything shaped like a credential.
"""

from __future__ import annotations

import base64
import functools
import re
import traceback
from collections.abc import Iterable

REDACTED = "[redacted]"

# A secret shorter than this is not looked for literally: replacing every "ab" would garble
# the message and hide nothing worth hiding.
MIN_SECRET_LENGTH = 6
# The shortest run of a secret's characters that gives it away: 8 random key characters are
# some 47 bits, and no operator's sentence holds 8 of a random key's characters in its order.
PIECE = 8
# The characters a secret's pieces are matched on; the rest (spaces, punctuation, the -, _ and
# = a key or its base64 may hold) only separates them, on both sides.
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
_PIECE_CHARACTER = re.compile(r"[A-Za-z0-9]")

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


# The most of an upstream's words any error keeps (the ledger, the logs, the alerts, the pages),
# counted after scrubbing: what matters fits, and a long echo of a request stays out.
KEPT_LIMIT = 1000

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
    """`text` with each of `secrets` (whole, in pieces, encoded) and everything shaped like a
    credential replaced by `[redacted]`."""
    if not text:
        return text
    secrets = tuple(secret for secret in secrets if secret and len(secret) >= MIN_SECRET_LENGTH)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    pieces = _pieces(frozenset(secrets))
    if pieces:
        text = _pieces_redacted(text, pieces)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def secret_forms(secret: str) -> tuple[str, ...]:
    """The ways a secret is written out by whatever quotes it: as it is, URL-encoded, and in
    base64 at each of the three alignments it can start at inside a longer encoded string
    ("Basic " + base64("user:key"), a bearer header encoded whole), each with the characters
    that depend on its neighbours left off."""
    scheme, separator, rest = secret.partition("://")
    if separator and scheme.lower() in ("http", "https") and "/" in rest:
        # A URL that is a secret (a Slack webhook's) is secret past its host: its scheme and
        # host are in every message about it, and say nothing.
        secret = rest.split("/", 1)[1]
    raw = secret.encode()
    forms = [secret, _percent_encoded(raw)]
    for offset, lead in ((0, 0), (1, 2), (2, 3)):
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        forms.append(encoded[lead:-3])  # the last group depends on what follows
    return tuple(form for form in forms if form)


def _percent_encoded(raw: bytes) -> str:
    unreserved = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
    return "".join(chr(byte) if byte in unreserved else f"%{byte:02X}" for byte in raw)


@functools.lru_cache(maxsize=32)
def _pieces(secrets: frozenset[str]) -> frozenset[str]:
    """Every run of `PIECE` characters of each secret's forms, separators taken out."""
    found: set[str] = set()
    for secret in secrets:
        for form in secret_forms(secret):
            folded = _SEPARATORS.sub("", form)
            found.update(folded[i : i + PIECE] for i in range(len(folded) - PIECE + 1))
    return frozenset(found)


def _pieces_redacted(text: str, pieces: frozenset[str]) -> str:
    """`text` with every stretch that spells out a run of a secret's pieces, separators and
    all, replaced by `[redacted]`."""
    folded = _SEPARATORS.sub("", text)
    spans: list[list[int]] = []  # [first, last] indexes into `folded`, merged as they overlap
    for i in range(len(folded) - PIECE + 1):
        if folded[i : i + PIECE] in pieces:
            if spans and i <= spans[-1][1] + 1:
                spans[-1][1] = i + PIECE - 1
            else:
                spans.append([i, i + PIECE - 1])
    if not spans:
        return text
    positions = [match.start() for match in _PIECE_CHARACTER.finditer(text)]
    for first, last in reversed(spans):
        text = text[: positions[first]] + REDACTED + text[positions[last] + 1 :]
    return text
