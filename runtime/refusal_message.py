"""What of a refused request may be shown (in the control room, the metrics, the log): its field
as a well-formed path, and the door's message without anything the client wrote.

The doors' messages name fields; some also quote back a value the client sent (a model's or a
tool's name, a role, an id it refers to) or list ids after a colon. Those values are the
client's, so they are masked ('…'): the ones under the refused field, read from the body (a
message quotes from there), or, where the body can't be read that way, any string the body
holds as a value. The door's own words stay, and the field's name. Then the scrubber
(`gateway/engine/scrub.py`) takes out the caller's key, whole or in pieces, and anything shaped
like a credential, and the message is cut to `MESSAGE_LIMIT`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.engine import codec
from gateway.engine.scrub import scrub, scrub_cut

OTHER = "other"  # a field that isn't a well-formed path
MASK = "…"
MESSAGE_LIMIT = 300
# A body past this is searched as bytes rather than read (what a refusal's message may cost).
PARSE_LIMIT = 1 << 20
# The most strings of a value looked at, and how deep.
MAX_STRINGS = 2000
MAX_DEPTH = 16

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,39}"
# Names, and indices as `[3]` (OpenAI's doors) or `.3` (Anthropic's).
_PATH = re.compile(rf"{_NAME}(?:\.{_NAME}|\.[0-9]{{1,6}}|\[[0-9]{{1,6}}\])*")
_STEP = re.compile(r"\[([0-9]+)\]|\.?([^.\[\]]+)")
# A quoted span ('…' or "…", not an apostrophe inside a word), or a run of a word's characters.
_SPAN = re.compile(
    r"(?<![\w])(?P<quote>['\"])(?P<quoted>[^'\"\n]{1,200}?)(?P=quote)(?![\w])"
    r"|(?P<word>[\w+/=~-]+(?:[.:][\w+/=~-]+)*)"
)
# A word an id is made of (digits, '_', '-', capitals), unlike the door's own words.
_ID_LIKE = re.compile(r"[0-9_+/=~-]|.[A-Z]")
_MISSING = object()


def field_path(field: str | None, secrets: tuple[str, ...] = ()) -> str:
    """The field at fault as the door named it (`messages[3].role`, or `messages.3.role`) if it
    is a well-formed path of names and indices, "" when none is, else "other" (a name a client
    made up that holds anything but a name's characters, or a credential)."""
    if not field:
        return ""
    if len(field) > 128 or not _PATH.fullmatch(field):
        return OTHER
    return field if scrub(field, secrets) == field else OTHER


def shown_message(
    message: str, *, field: str | None = None, body: bytes = b"", secrets: tuple[str, ...] = ()
) -> str:
    """`message` with what the client wrote masked (see above): a quoted span that is one of its
    strings, an unquoted id-like word that is one; scrubbed and cut. `body` is the request's, as
    it arrived (b"" when the door refused it before reading it: then the message is the door's
    own words); `field` the refused field as the door named it."""
    path = field_path(field, secrets)
    shaped = message[:1000]
    if field and path == OTHER:
        shaped = shaped.replace(field, MASK)  # a made-up name, quoted back whole
    if body:
        shaped = _masked(shaped, path, _echoes(field, body), body)
    kept = scrub_cut(shaped, MESSAGE_LIMIT, secrets, head=1000)
    return kept.encode("utf-8", "replace").decode("utf-8")


def _masked(message: str, path: str, echoes: frozenset[str] | None, body: bytes) -> str:
    """`message` with each span that `echoes` holds masked; with `echoes` None (the body wasn't
    read), each span the body holds as a value, or as a name that isn't one."""
    names = {path, *re.split(r"[.\[\]]+", path)} - {""} if path != OTHER else set()

    def sent(text: str) -> bool:
        if text in names:
            return False
        if echoes is not None:
            return text in echoes
        as_value, as_name = _held(text, body)
        return as_value or (as_name and field_path(text) == OTHER)

    def mask(match: re.Match[str]) -> str:
        quoted, word = match["quoted"], match["word"]
        if quoted is not None:
            return f"{match['quote']}{MASK}{match['quote']}" if sent(quoted) else match[0]
        return MASK if _ID_LIKE.search(word) and sent(word) else word

    return _SPAN.sub(mask, message)


def _echoes(field: str | None, body: bytes) -> frozenset[str] | None:
    """The strings under the refused field, or None when the body can't be read for them (no
    field named, too large, not JSON, no such field)."""
    if not field or len(body) > PARSE_LIMIT:
        return None
    try:
        value = codec.loads(body)
    except (ValueError, RecursionError):
        return None
    for index, name in _STEP.findall(field):
        value = _step(value, index, name)
        if value is _MISSING:
            return None
    found: set[str] = set()
    _strings(value, found, MAX_DEPTH)
    return frozenset(found)


def _step(value: Any, index: str, name: str) -> Any:
    if isinstance(value, dict):
        return value.get(name or index, _MISSING)
    position = index or name
    if isinstance(value, list) and position.isdigit() and int(position) < len(value):
        return value[int(position)]
    return _MISSING


def _strings(value: Any, found: set[str], depth: int) -> None:
    if len(found) >= MAX_STRINGS or depth < 0:
        return
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, found, depth - 1)
    elif isinstance(value, list):
        for item in value:
            _strings(item, found, depth - 1)


def _held(text: str, body: bytes) -> tuple[bool, bool]:
    """Whether the body holds `text` as a JSON string (as written, or escaped to ASCII): as a
    value, and as an object's name."""
    as_value = as_name = False
    for form in {json.dumps(text, ensure_ascii=False), json.dumps(text)}:
        found = re.finditer(re.escape(form.encode("utf-8", "replace")) + rb"\s*(:?)", body)
        for occurrence in found:
            if occurrence[1]:
                as_name = True
            else:
                as_value = True
            if as_value and as_name:
                return True, True
    return as_value, as_name
