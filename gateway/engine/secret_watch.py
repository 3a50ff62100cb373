"""A provider's answers watched for the secrets this process holds, so that a key it sends
upstream never comes back to a client inside an answer, whole or streamed.

The secrets are the ones its error text is scrubbed of (`ProviderConfig.secrets`: its own key,
the other providers' keys, the channels' tokens), looked for in each form `scrub.secret_forms`
writes them out in (as they are, URL-encoded, in base64). An answer is never scrubbed: one that
quotes a secret is a failed answer (`secret_in_answer`), which is neither served nor cached. A
model has a key to quote only when something upstream put one in its way (a proxy that echoes
the request, a system prompt that holds one), so such an answer is failed, not mended.

A stream is watched piece by piece (`StreamWatch`). A secret may arrive split across pieces, so
the end of the text so far that could begin one is held back until the next piece says whether
it does; only that much is held, and text that can begin no secret goes on at once. A piece
costs a look at itself and at the held end before it, never at the answer so far.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.engine.scrub import MIN_SECRET_LENGTH, secret_forms

# A form longer than this is looked for by its first LONGEST characters (as much a giveaway as
# the whole): what a stream may hold back, and the watch's size, stay bounded whatever a
# secret's length.
LONGEST = 256

# The kinds of a stream's text, each watched apart (a tool call's arguments: by its index).
TEXT = "text"
THINKING = "thinking"
Kind = str | int


@dataclass(frozen=True, slots=True, eq=False)
class SecretWatch:
    """What one provider's answers are watched for: every written form of its secrets."""

    forms: tuple[str, ...]
    # Each form's proper beginnings of two characters or more, filed under their last two,
    # longest first (a pair of characters picks out a few of them, where one would pick many),
    # and the forms' first characters: what the end of a stream's text may be the start of.
    beginnings: dict[str, tuple[str, ...]]
    firsts: frozenset[str]
    reach: int  # the longest form's length - 1: the most a stream holds back
    shortest: int  # the shortest form's length: text shorter than it holds none

    def found_in(self, text: str) -> bool:
        return any(form in text for form in self.forms)


def secret_watch(secrets: Iterable[str]) -> SecretWatch | None:
    """The watch over `secrets`; None when none is long enough to look for (a provider with no
    secret costs its answers nothing). Made once per set of secrets: every provider holds the
    others' besides its own, so they share one."""
    return _watch_over(frozenset(secrets))


@functools.lru_cache(maxsize=16)
def _watch_over(secrets: frozenset[str]) -> SecretWatch | None:
    forms = {
        form[:LONGEST]
        for secret in secrets
        if len(secret) >= MIN_SECRET_LENGTH
        for form in secret_forms(secret)
        if len(form) >= MIN_SECRET_LENGTH
    }
    if not forms:
        return None
    filed: dict[str, set[str]] = {}
    for form in forms:
        for end in range(2, len(form)):
            filed.setdefault(form[end - 2 : end], set()).add(form[:end])
    beginnings = {
        pair: tuple(sorted(found, key=len, reverse=True)) for pair, found in filed.items()
    }
    ordered = tuple(sorted(forms, key=len, reverse=True))
    firsts = frozenset(form[0] for form in forms)
    return SecretWatch(ordered, beginnings, firsts, len(ordered[0]) - 1, len(ordered[-1]))


class StreamWatch:
    """One stream's watch: for each kind of its text, its tail that could begin a secret (the
    longest; a secret that ends in the next piece starts within it, so a piece's check looks at
    the tail and the piece alone) and how many of the tail's characters are held back."""

    __slots__ = ("_kinds", "_watch")

    def __init__(self, watch: SecretWatch) -> None:
        self._watch = watch
        self._kinds: dict[Kind, tuple[str, int]] = {}

    def passed(self, kind: Kind, text: str) -> str | None:
        """What of `kind`'s text may go on now that `text` has come (what it held back before,
        then `text`, less an end that could begin a secret); None when a secret is in it."""
        watch = self._watch
        tail, held = self._kinds.get(kind, _NONE)
        window = tail + text if tail else text
        size = len(window)
        if size >= watch.shortest:
            for form in watch.forms:
                if form in window:
                    return None
        keep = 0  # the longest end of the window that could begin a form
        if size > 1:
            for beginning in watch.beginnings.get(window[-2:], ()):
                if window.endswith(beginning):
                    keep = len(beginning)
                    break
        if not keep and size and window[-1] in watch.firsts:
            keep = 1
        if not (tail or keep):  # the usual piece: nothing held before, nothing to hold now
            return text
        given = len(tail) - held  # of the window, what went before
        held = min(keep, size - given)
        self._kinds[kind] = (window[size - keep :], held) if keep else _NONE
        return window[given : size - held]

    def held_back(self, kind: Kind) -> str:
        """What `kind` holds back, let go: its text is followed by another kind's (its tail
        stays watched), or the stream has ended."""
        tail, held = self._kinds.get(kind, _NONE)
        if not held:
            return ""
        self._kinds[kind] = (tail, 0)
        return tail[len(tail) - held :]


_NONE = ("", 0)
