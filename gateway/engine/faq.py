"""The static tier: which shipped or operator-written answer fits a question, if any.

Questions are normalized (case, punctuation, whitespace), matched exactly against every
question and alternative phrasing, then fuzzily (rapidfuzz) above the policy's threshold.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rapidfuzz import fuzz, process

_SPACES = re.compile(r"\s+")

# Words that carry no topic. Fuzzy matching compares what's left, so "who are you" matches
# nothing rather than every phrasing that shares "are you".
STOP_WORDS = frozenset(
    """a about am an and any are as at be but by can could did do does for from get had has
    have hello hey hi how i if in is it its know me my no not of on or our please s should
    so tell that the there these this those to want was we what whats when where which who
    whom why will with would you your""".split()  # noqa: SIM905
)


def content_words(normalized: str) -> str:
    return " ".join(word for word in normalized.split() if word not in STOP_WORDS)


def normalize(text: str) -> str:
    """Casefolded, punctuation and symbols turned to spaces, whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    cleaned = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in folded)
    return _SPACES.sub(" ", cleaned).strip()


@dataclass(frozen=True, slots=True)
class FaqEntry:
    answer_id: int
    answer: str
    phrasings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FaqMatch:
    entry: FaqEntry
    score: float  # 0–100; 100 for an exact match
    exact: bool
    phrasing: str


class FaqIndex:
    """An immutable index over the enabled answers, built once per config snapshot."""

    # Past this length a question is a task, not an FAQ; fuzzy scores on long text mislead.
    MAX_QUESTION_CHARS = 500
    # How many of the best-scoring phrasings a tie is settled among.
    TIE_CANDIDATES = 10

    def __init__(self, entries: tuple[FaqEntry, ...]) -> None:
        self.entries = entries
        self._exact: dict[str, tuple[FaqEntry, str]] = {}
        self._choices: list[str] = []
        self._owners: list[tuple[FaqEntry, str]] = []
        for entry in entries:
            for phrasing in entry.phrasings:
                key = normalize(phrasing)
                if not key:
                    continue
                self._exact.setdefault(key, (entry, phrasing))
                words = content_words(key)
                if words:
                    self._choices.append(words)
                    self._owners.append((entry, phrasing))

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, question: str, *, threshold: float) -> FaqMatch | None:
        key = normalize(question)
        if not key:
            return None
        exact = self._exact.get(key)
        if exact is not None:
            return FaqMatch(entry=exact[0], score=100.0, exact=True, phrasing=exact[1])
        words = content_words(key)
        if not words or len(key) > self.MAX_QUESTION_CHARS or not self._choices:
            return None
        # token_set_ratio scores the shared words against each side's rest, so extra words on
        # either side ("can i get a refund" / "refund policy") cost little. That also gives a
        # full score to every phrasing holding all the question's words ("open" is in both
        # "when are you open" and "open source models"): among the best, the one closest as a
        # whole wins.
        candidates = process.extract(
            words,
            self._choices,
            scorer=fuzz.token_set_ratio,
            processor=None,
            score_cutoff=threshold,
            limit=self.TIE_CANDIDATES,
        )
        if not candidates:
            return None
        top = candidates[0][1]
        _, score, position = max(
            (c for c in candidates if c[1] == top),
            key=lambda c: (fuzz.token_sort_ratio(words, c[0], processor=None), -c[2]),
        )
        entry, phrasing = self._owners[position]
        return FaqMatch(entry=entry, score=round(float(score), 1), exact=False, phrasing=phrasing)
