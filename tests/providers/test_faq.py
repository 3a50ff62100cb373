"""The static tier's matching, on the 50 answers that ship with the project."""

from __future__ import annotations

import json

import pytest

from gateway.engine.faq import FaqEntry, FaqIndex, normalize
from providers.services.seeding import DEFAULT_ANSWERS_FILE

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = pytest.mark.backend_free

THRESHOLD = 85


@pytest.fixture(scope="module")
def shipped() -> FaqIndex:
    entries = json.loads(DEFAULT_ANSWERS_FILE.read_text(encoding="utf-8"))
    return FaqIndex(
        tuple(
            FaqEntry(answer_id=i, answer=e["answer"], phrasings=(e["question"], *e["alternatives"]))
            for i, e in enumerate(entries)
        )
    )


def _question_of(index: FaqIndex, match) -> str:
    return match.entry.phrasings[0]


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("What ARE your hours?", "what are your hours"),
        ("  opening\thours!!  ", "opening hours"),
        ("refund—policy?", "refund policy"),
        ("Ｆｕｌｌｗｉｄｔｈ", "fullwidth"),
        ("???", ""),
    ],
)
def test_normalization_folds_case_punctuation_and_spaces(text, normalized):
    assert normalize(text) == normalized


def test_every_shipped_phrasing_matches_its_own_answer_exactly(shipped):
    for entry in shipped.entries:
        for phrasing in entry.phrasings:
            match = shipped.match(phrasing.upper() + "?!", threshold=THRESHOLD)
            assert match is not None and match.exact and match.entry is entry, phrasing
            assert match.score == 100.0


@pytest.mark.parametrize(
    ("question", "expected_fragment"),
    [
        ("what are your opening hours", "hours"),
        ("can i get a refund", "refund"),
        ("how would I go about cancelling a subscription", "cancel"),
        ("do you have a free trial", "trial"),
        ("is my data safe", "data"),
        ("where is your office", "office"),
    ],
)
def test_close_phrasings_match_fuzzily_above_the_threshold(shipped, question, expected_fragment):
    match = shipped.match(question, threshold=THRESHOLD)
    assert match is not None, question
    assert not match.exact and match.score >= THRESHOLD
    words = " ".join(match.entry.phrasings).lower() + " " + match.entry.answer.lower()
    assert expected_fragment in words


@pytest.mark.parametrize(
    "question",
    [
        "write me a poem about cats",
        "what is the capital of france",
        "Explain quantum computing in simple terms",
        "who are you",
        "what can you do",
        "summarize this article about climate change",
        "",
        "   ?!  ",
    ],
)
def test_unrelated_or_empty_questions_match_nothing(shipped, question):
    assert shipped.match(question, threshold=THRESHOLD) is None


def test_the_threshold_decides(shipped):
    match = shipped.match("price", threshold=THRESHOLD)  # "prices" is a phrasing
    assert match is not None and THRESHOLD <= match.score < 95
    assert shipped.match("price", threshold=95) is None


def test_a_long_text_is_never_a_fuzzy_match():
    index = FaqIndex((FaqEntry(1, "We are open 9 to 6.", ("opening hours",)),))
    assert index.match("opening hours " * 100, threshold=50) is None


def test_an_empty_index_matches_nothing():
    assert FaqIndex(()).match("opening hours", threshold=0) is None


def test_a_tie_at_the_top_goes_to_the_phrasing_closest_as_a_whole():
    # "open" is all of "when do you open"'s content words, and is in both phrasings: each
    # scores 100 on shared words, but only one is about opening hours.
    index = FaqIndex(
        (
            FaqEntry(
                answer_id=1, answer="Our models are open source.", phrasings=("open source models",)
            ),
            FaqEntry(answer_id=2, answer="09:00–18:00.", phrasings=("when are you open",)),
        )
    )
    match = index.match("when do you open", threshold=THRESHOLD)
    assert match is not None and match.entry.answer_id == 2 and match.score == 100.0
