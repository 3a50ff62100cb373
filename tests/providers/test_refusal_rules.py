"""The refusals' rules without an endpoint: the labels stay bounded, a message keeps the door's
words and loses the client's, the sample follows a clock the test moves, and both stores keep
the last ones, newest first, up to their cap (the endpoints: test_refusals.py)."""

from __future__ import annotations

import json
import secrets

import pytest

from gateway.state.refusal_log import REFUSALS_KEPT, RefusalNote, note_decoded, note_encoded
from runtime import refusal_message, refusals
from runtime.refusal_message import MASK, OTHER, field_path, shown_message
from runtime.refusals import KeepRate, code_label, field_label
from tests.providers.test_state_stores import redis_store, store  # noqa: F401 - fixtures


@pytest.fixture
def fresh_labels(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    labels: set[str] = set()
    monkeypatch.setattr(refusals, "_field_labels", labels)
    return labels


# The labels ---------------------------------------------------------------------------------


def test_a_field_path_keeps_its_indices_and_its_label_makes_them_a_star(fresh_labels):
    assert field_path("messages[3].content[0].type") == "messages[3].content[0].type"
    assert field_label("messages[3].content[0].type") == "messages.*.content.*.type"
    assert field_path("messages.3.content.0.type") == "messages.3.content.0.type"
    assert field_label("messages.3.content.10.type") == "messages.*.content.*.type"
    assert field_label(field_path("tool_choice.name")) == "tool_choice.name"


def test_no_field_is_an_empty_label_and_a_made_up_one_is_other(fresh_labels):
    assert field_path(None) == field_path("") == ""
    for made_up in ("what is my prompt", "a/b", "x" * 41, "messages[]", "'quoted'", "ünï"):
        assert field_path(made_up) == OTHER, made_up


def test_a_field_named_like_a_key_is_other():
    key = "fgw_" + "aZ09" * 8  # a credential's shape, within a name's characters
    assert field_path(key) == OTHER
    assert field_path("model_name", secrets=("model_name",)) == OTHER


def test_a_label_past_its_length_is_other(fresh_labels):
    path = ".".join(["abcdefghij"] * 6)  # 65 characters
    assert field_path(path) == path
    assert field_label(path) == OTHER


def test_a_process_labels_only_so_many_distinct_fields(fresh_labels, monkeypatch):
    monkeypatch.setattr(refusals, "FIELD_LABELS_MAX", 3)
    assert [field_label(f"made_up_{n}") for n in range(5)] == [
        "made_up_0",
        "made_up_1",
        "made_up_2",
        OTHER,
        OTHER,
    ]
    assert field_label("made_up_1") == "made_up_1"  # one already labelled keeps its label


def test_a_code_is_a_doors_own_word_or_other():
    assert code_label("invalid_field") == "invalid_field"
    assert code_label("Invalid Field") == code_label("x" * 60) == OTHER


# The message --------------------------------------------------------------------------------


def test_a_value_the_door_quotes_back_is_masked_and_the_fields_name_stays():
    tool = {"type": "function", "function": {"name": "weather"}}
    body = json.dumps({"model": "auto", "tools": [tool, tool]}).encode()
    shown = shown_message(
        "Two tools are named 'weather'.", field="tools[1].function.name", body=body
    )
    assert shown == f"Two tools are named '{MASK}'."
    shown = shown_message(
        "'tool_choice' names 'lookup', which is not in 'tools'.",
        field="tool_choice",
        body=b'{"tool_choice": {"type": "function", "function": {"name": "lookup"}}}',
    )
    assert shown == f"'tool_choice' names '{MASK}', which is not in 'tools'."
    shown = shown_message(
        "'function' messages are deprecated: use 'tool'.",
        field="messages.1.role",
        body=b'{"messages": [{"role": "user"}, {"role": "function"}]}',
    )
    assert shown == f"'{MASK}' messages are deprecated: use 'tool'."


def test_ids_listed_without_quotes_are_masked_and_the_doors_words_beside_them_stay():
    call = {"role": "assistant", "tool_calls": [{"id": "call_Ab12"}, {"id": "toolu-99"}]}
    body = json.dumps({"messages": [{"role": "user", "content": "Hi."}, call]}).encode()
    message = (
        "Each tool call of an assistant message must be answered by a tool message right "
        "after it; not answered: call_Ab12, toolu-99."
    )
    expected = message.replace("call_Ab12, toolu-99", f"{MASK}, {MASK}")
    assert shown_message(message, field="messages[1]", body=body) == expected
    too_large = body + b" " * refusal_message.PARSE_LIMIT  # searched as bytes instead
    assert shown_message(message, field="messages[1]", body=too_large) == expected


def test_the_doors_own_words_stay_though_the_body_holds_them_elsewhere():
    message = "'role' must be one of 'system', 'developer', 'user', 'assistant' or 'tool'."
    body = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "robot"}]}'
    assert shown_message(message, field="messages[1].role", body=body) == message
    fixed = "This client key is not valid."
    assert shown_message(fixed) == fixed  # refused before the body: the door's words only


def test_a_key_in_a_message_is_scrubbed_whole_and_in_pieces():
    key = "fgw_" + secrets.token_urlsafe(32)
    body = json.dumps({"model": key}).encode()
    shown = shown_message(f"The model '{key}' does not exist here.", field="model", body=body)
    assert shown == f"The model '{MASK}' does not exist here."
    body = json.dumps({key: 1}).encode()
    shown = shown_message(f"Unknown field '{key}'.", field=key, body=body)
    assert shown == f"Unknown field '{MASK}'."
    shown = shown_message(f"half of it: {key[:24]}", secrets=(key,))
    assert key[4:12] not in shown and "[redacted]" in shown


def test_a_message_is_cut_to_its_limit_and_holds_only_text():
    assert len(shown_message("word " * 500)) <= refusal_message.MESSAGE_LIMIT
    assert shown_message("a name\ud800 holds a lone surrogate") == "a name? holds a lone surrogate"


# The sample ---------------------------------------------------------------------------------


def test_the_sample_takes_a_burst_then_a_few_a_second_by_the_clock_given():
    rate = KeepRate(per_s=2.0, burst=3)
    t = 1000.0
    assert [rate.allow(t) for _ in range(5)] == [True, True, True, False, False]
    assert rate.allow(t + 0.4) is False  # 0.8 of a refusal's room
    assert rate.allow(t + 0.5) is True
    assert [rate.allow(t + 10) for _ in range(4)] == [True, True, True, False]  # the burst, no more


def test_a_clock_that_steps_back_refills_nothing_and_goes_on_from_there():
    rate = KeepRate(per_s=1.0, burst=1)
    assert rate.allow(1000.0) is True
    assert rate.allow(500.0) is False
    assert rate.allow(500.5) is False
    assert rate.allow(501.0) is True


# The stores ---------------------------------------------------------------------------------


def _note(n: int) -> RefusalNote:
    return RefusalNote(
        at=1_700_000_000.0 + n,
        door="/v1/messages",
        app="suite",
        status=400,
        code="invalid_field",
        field=f"messages[{n}].role",
        message="'role' must be user or assistant.",
    )


async def test_the_store_keeps_the_last_refusals_newest_first_up_to_its_cap(store):  # noqa: F811
    assert await store.refusals_read() == []
    for n in range(REFUSALS_KEPT + 5):
        await store.refusal_add(_note(n))
    kept = await store.refusals_read()
    assert len(kept) == REFUSALS_KEPT
    assert kept[0] == _note(REFUSALS_KEPT + 4) and kept[-1] == _note(5)
    assert await store.refusals_read(3) == [_note(REFUSALS_KEPT + 4 - n) for n in range(3)]
    assert await store.refusals_read(0) == []


def test_a_note_reads_back_as_written_and_a_foreign_entry_as_none():
    note = _note(7)
    assert note_decoded(note_encoded(note)) == note
    assert note_decoded("not json") is None
    assert note_decoded('{"at": 1}') is None
