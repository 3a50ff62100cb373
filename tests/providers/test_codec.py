"""JSON on the request path (`gateway.engine.codec`, and the API's answers in
`edge.api.json_answer`): orjson's speed, and the standard library's answer wherever orjson
would give none, so nothing that encoded or decoded before fails now."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from edge.api.json_answer import JsonAnswer
from gateway.engine import codec

pytestmark = pytest.mark.backend_free

PLAIN = [
    {"model": "llama3.1:8b", "messages": [{"role": "user", "content": "Say hello."}]},
    {"text": "café ünïcode — 日本語 🙂", "n": 3, "t": 0.7, "ok": True, "none": None},
    [1, -2, 3.5, 1e-7, 123456789012, [], {}],
    'a string with "quotes", \\ and \n\t control \x01 characters',
]


@pytest.mark.parametrize("value", PLAIN)
def test_plain_data_is_what_the_standard_library_reads_back(value):
    encoded = codec.dumps(value)

    assert json.loads(encoded) == value
    assert codec.loads(encoded) == value
    assert codec.dumps_text(value) == encoded.decode()


@pytest.mark.parametrize("value", [*PLAIN[:2], [1, -2, 3.5, 0.25, 123456789012, [], {}]])
def test_compact_unescaped_json_is_the_standard_librarys_compact_form(value):
    # What the answer cache's keys were made of: they stay the same (but for a number written
    # with an exponent, 1e-7 for the standard library's 1e-07: a miss, once).
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    assert codec.dumps(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"big": 10**30},  # past 64 bits
        {"lone": "\ud800 surrogate"},
        {1: "a key that is not a string"},
    ],
)
def test_what_orjson_refuses_is_encoded_as_before(value):
    encoded = codec.dumps(value)

    assert encoded == json.dumps(value, separators=(",", ":")).encode()
    assert json.loads(encoded) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": NaN}', "nan"),
        ('"\\ud800"', "\ud800"),
        (b"\xef\xbb\xbf{}", {}),  # a byte-order mark
    ],
)
def test_what_orjson_refuses_to_read_is_read_as_before(text, expected):
    value = codec.loads(text)

    if expected == "nan":
        assert value["a"] != value["a"]
    else:
        assert value == expected


@pytest.mark.parametrize("text", [b"", b"{", b'{"a": 1,}', b"\xff\xfe\xfa", b"[" * 5000])
def test_what_holds_no_json_fails_as_the_standard_library_fails(text):
    with pytest.raises((ValueError, RecursionError)):
        codec.loads(text)


@dataclasses.dataclass
class Point:
    x: int


def test_an_api_answer_writes_djangos_types_as_jsonresponse_does():
    moment = datetime.datetime(2026, 12, 5, 6, 30, 1, 123456, tzinfo=datetime.UTC)
    value = {
        "at": moment,
        "day": moment.date(),
        "cost": decimal.Decimal("0.000120"),
        "id": uuid.UUID(int=7),
        "span": datetime.timedelta(seconds=90),
        "text": "naïve",
    }
    answer = JsonAnswer(value, status=201, headers={"X-Request-Id": "r"})

    assert json.loads(answer.content) == json.loads(json.dumps(value, cls=DjangoJSONEncoder))
    assert answer["Content-Type"] == "application/json"
    assert (answer.status_code, answer["X-Request-Id"]) == (201, "r")
    assert "naïve".encode() in answer.content  # UTF-8, not escaped


def test_an_api_answer_refuses_what_jsonresponse_refuses():
    with pytest.raises(TypeError):
        JsonAnswer({"point": Point(1)})  # a dataclass: no more written than before
