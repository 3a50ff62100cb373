"""A provider's answers watched for the gateway's secrets (`gateway/engine/secret_watch.py`): a
whole answer that quotes one is a failure (`Failures.quoted_secret`), and a stream is watched
piece by piece (`CompletionStream`), a secret split across pieces caught, only what could begin
one held back, and what was held given out once it can't be one."""

from __future__ import annotations

import base64
import json
import random
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from gateway.adapters.errors import ERROR_TABLE, ErrorClass, ProviderError
from gateway.adapters.failures import Failures
from gateway.adapters.messages import Completion, Piece, Reasoning, ToolCall, ToolCallDelta
from gateway.adapters.stream import CompletionStream
from gateway.engine.secret_watch import LONGEST, TEXT, StreamWatch, secret_watch

pytestmark = pytest.mark.backend_free

KEY = "sk-canary-0123456789abcdef+abcd/ef01"
OTHER = "xoxb-a-channels-token-4242424242"
ANSWER = f"Sure. The key you asked about is {KEY}, keep it safe."


def streamed(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def through(watch: StreamWatch, pieces: list[str]) -> tuple[str, bool]:
    """What a stream of `pieces` lets go, and whether a secret stopped it."""
    out = []
    for piece in pieces:
        passed = watch.passed(TEXT, piece)
        if passed is None:
            return "".join(out), True
        out.append(passed)
    return "".join(out) + watch.held_back(TEXT), False


# The watch --------------------------------------------------------------------------------


def test_no_secret_long_enough_to_look_for_means_no_watch_at_all():
    assert secret_watch(()) is None
    assert secret_watch(("", "short")) is None


@pytest.mark.parametrize(
    "form",
    [
        KEY,
        quote(KEY, safe=""),
        base64.b64encode(f"Bearer {KEY}".encode()).decode(),
        base64.b64encode(f"user:{KEY}".encode()).decode(),
    ],
    ids=["whole", "url-encoded", "bearer-in-base64", "basic-in-base64"],
)
def test_a_secret_is_found_in_each_form_it_is_written_in(form):
    watch = secret_watch((KEY,))
    assert watch is not None
    assert watch.found_in(f"here: {form} there")
    assert not watch.found_in("a plain answer, sk-canary and all, with no key in it")


def test_a_very_long_secret_is_watched_for_by_its_beginning():
    long_secret = "k" * 10 + "0123456789" * 100
    watch = secret_watch((long_secret,))
    assert watch is not None and watch.reach == LONGEST - 1
    assert watch.found_in("…" + long_secret[:LONGEST] + "…")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, len(ANSWER)])
def test_a_secret_split_across_pieces_is_caught_before_any_of_it_goes(size):
    watch = secret_watch((OTHER, KEY))
    assert watch is not None
    sent, stopped = through(StreamWatch(watch), streamed(ANSWER, size))
    assert stopped
    assert ANSWER.startswith(sent) and len(sent) <= ANSWER.index(KEY)


@pytest.mark.parametrize("size", [1, 3, 7])
def test_a_stream_with_no_secret_goes_through_whole_and_in_order(size):
    watch = secret_watch((KEY,))
    assert watch is not None
    text = f"Keys start with {KEY[:12]} and are {len(KEY)} characters long: sk-canary-01."
    assert through(StreamWatch(watch), streamed(text, size)) == (text, False)


def test_only_what_could_begin_a_secret_is_held_back():
    watch = secret_watch((KEY,))
    assert watch is not None
    stream = StreamWatch(watch)
    assert stream.passed(TEXT, "Hello there, ") == "Hello there, "
    assert stream.passed(TEXT, "your key: sk-can") == "your key: "
    assert stream.passed(TEXT, "ned fish") == "sk-canned fish"


def test_a_secret_begun_before_other_text_and_ended_after_it_is_caught_and_nothing_doubled():
    watch = secret_watch((KEY,))
    assert watch is not None
    stream = StreamWatch(watch)
    assert stream.passed(TEXT, "Use sk") == "Use "
    assert stream.held_back(TEXT) == "sk"  # a tool call's piece came between
    assert stream.passed(TEXT, "-canar") == ""
    assert stream.held_back(TEXT) == "-canar"  # given once, after the "sk" given before
    assert stream.passed(TEXT, KEY[len("sk-canar") :]) is None


@pytest.mark.parametrize("seed", range(5))
def test_whatever_the_cuts_a_stream_comes_out_whole_or_is_stopped_at_its_secret(seed):
    chance = random.Random(seed)
    watch = secret_watch((KEY, OTHER))
    assert watch is not None
    for _ in range(200):
        words = [chance.choice(["sk-", "can", "ary", " the", "xox", "b-", KEY[:9], OTHER[:7]])]
        words += [chance.choice([KEY, OTHER, "plain words", "sk-canary-0"]) for _ in range(3)]
        text = "".join(words)
        stream, sent, cut, stopped = StreamWatch(watch), [], 0, False
        while cut < len(text) and not stopped:
            size = chance.randint(1, 9)
            passed = stream.passed(TEXT, text[cut : cut + size])
            cut += size
            stopped = passed is None
            sent.append(passed or "")
        sent.append("" if stopped else stream.held_back(TEXT))
        given = "".join(sent)
        assert stopped == (KEY in text or OTHER in text)
        assert given == text if not stopped else text.startswith(given)
        assert KEY not in given and OTHER not in given


# A stream, piece by piece ------------------------------------------------------------------


class Lines:
    """A dialect of the test's own, one JSON object a line: {"t": text}, {"r": thinking},
    {"c": [index, id, name, arguments]}, {"end": reason}."""

    framing = "ndjson"

    def decode(self, event: dict[str, Any], stream: CompletionStream) -> Piece:
        if "end" in event:
            stream.finish_reason, stream.done = event["end"], True
            return ""
        if "r" in event:
            return Reasoning(event["r"])
        if "c" in event:
            return ToolCallDelta(*event["c"])
        return event["t"]


def stream_of(events: list[dict[str, Any]], secrets: tuple[str, ...] = (KEY,)) -> CompletionStream:
    body = "".join(json.dumps(event) + "\n" for event in [*events, {"end": "stop"}]).encode()
    response = httpx.Response(200, content=body)
    return CompletionStream("leaky", Lines(), Failures(secrets), response, 5.0, 0.0)


async def read_all(stream: CompletionStream) -> list[Piece]:
    pieces = []
    while (piece := await stream.next_text(1e12, "too slow")) is not None:
        pieces.append(piece)
    return pieces


async def test_a_stream_with_no_secret_configured_is_given_piece_for_piece():
    events = [{"t": piece} for piece in streamed(ANSWER, 4)]
    assert await read_all(stream_of(events, secrets=())) == streamed(ANSWER, 4)


async def test_a_secret_split_across_a_streams_text_fails_it_and_none_of_it_is_kept():
    stream = stream_of([{"t": piece} for piece in streamed(ANSWER, 4)])
    given: list[Piece] = []
    with pytest.raises(ProviderError) as caught:
        while (piece := await stream.next_text(1e12, "too slow")) is not None:
            given.append(piece)
    assert caught.value.error_class == ErrorClass.SECRET_IN_ANSWER
    assert KEY not in caught.value.message
    text = "".join(str(piece) for piece in given)
    assert ANSWER.startswith(text) and "sk-" not in text
    assert stream.completion(1.0).text == text  # the ledger's and the cache's text: what went


@pytest.mark.parametrize(
    "events",
    [
        [{"r": "I should "}, {"r": f"print {KEY[:9]}"}, {"r": f"{KEY[9:]} now"}, {"t": "ok"}],
        [
            {"t": "Calling."},
            {"c": [0, "call_1", "lookup", '{"key": "' + KEY[:20]]},
            {"c": [0, "", "", KEY[20:] + '"}']},
        ],
    ],
    ids=["thinking", "tool-call-arguments"],
)
async def test_a_secret_split_across_thinking_or_a_tool_calls_arguments_fails_it(events):
    with pytest.raises(ProviderError) as caught:
        await read_all(stream_of(events))
    assert caught.value.error_class == ErrorClass.SECRET_IN_ANSWER


async def test_what_was_held_back_goes_before_the_next_kind_of_piece_and_at_the_end():
    events = [
        {"r": "Thinking about s"},
        {"t": "Use sk"},
        {"c": [0, "call_1", "lookup", '{"q": "sk-ca']},
        {"c": [0, "", "", 'n"}']},
        {"t": " and sk-canar"},
    ]
    pieces = await read_all(stream_of(events))
    assert pieces == [
        Reasoning("Thinking about "),
        Reasoning("s"),
        "Use ",
        "sk",
        ToolCallDelta(0, "call_1", "lookup", '{"q": "'),
        ToolCallDelta(0, arguments='sk-can"}'),
        " and ",
        "sk-canar",
    ]


async def test_a_streams_whole_answer_is_what_was_given():
    events = [{"r": "Hm, s"}, {"t": "Use sk"}, {"c": [0, "c1", "f", '{"q": "sk-ca']}]
    stream = stream_of([*events, {"c": [0, "", "", 'n"}']}])
    await read_all(stream)
    completion = stream.completion(1.0)
    assert (completion.text, completion.reasoning) == ("Use sk", "Hm, s")
    assert completion.tool_calls == (ToolCall("c1", "f", '{"q": "sk-can"}'),)


# A whole answer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion",
    [
        Completion(text=ANSWER, provider="p", tokens_in=1, tokens_out=1, latency_ms=1),
        Completion(text="ok", provider="p", tokens_in=1, tokens_out=1, latency_ms=1, reasoning=KEY),
        Completion(
            text="",
            provider="p",
            tokens_in=1,
            tokens_out=1,
            latency_ms=1,
            tool_calls=(ToolCall("c1", "send", json.dumps({"token": OTHER})),),
        ),
    ],
    ids=["text", "thinking", "tool-call"],
)
def test_a_whole_answer_that_quotes_a_secret_is_a_failure_counted_against_its_provider(
    completion,
):
    failure = Failures((KEY, OTHER)).quoted_secret(completion)
    assert failure is not None and failure.error_class == ErrorClass.SECRET_IN_ANSWER
    assert KEY not in failure.message and OTHER not in failure.message
    rule = ERROR_TABLE[ErrorClass.SECRET_IN_ANSWER]
    assert rule.try_next and rule.breaker_failure


def test_a_whole_answer_without_a_secret_is_no_failure():
    plain = Completion(text="No key here.", provider="p", tokens_in=1, tokens_out=1, latency_ms=1)
    assert Failures((KEY,)).quoted_secret(plain) is None
    assert Failures(()).quoted_secret(plain) is None
