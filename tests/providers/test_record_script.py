"""The record script's fixed arguments go by name on both sides: the script declares each
from one list, the store sends each by name, and a name left out or made up is refused."""

from __future__ import annotations

import re

import pytest

from gateway.state.record_script import RECORD, RECORD_ARGS, record_args

pytestmark = pytest.mark.backend_free

BODY = RECORD.split("local TAIL = ", 1)[1]


def test_every_fixed_argument_is_declared_once_and_used_by_its_name():
    for position, name in enumerate(RECORD_ARGS, start=1):
        assert RECORD.count(f"local {name} = ARGV[{position}]\n") == 1
        assert re.search(rf"\b{name}\b", BODY), f"{name} is sent but the script never reads it"


def test_the_script_reads_no_fixed_argument_by_its_position():
    positions = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", BODY)}
    assert positions == set()
    assert f"local TAIL = {len(RECORD_ARGS) + 1}" in RECORD  # where the variable part starts


def test_the_arguments_come_in_the_scripts_order_whatever_order_they_are_named_in():
    values = {name: index for index, name in enumerate(RECORD_ARGS)}
    assert record_args(**dict(reversed(values.items()))) == list(range(len(RECORD_ARGS)))


def test_a_missing_or_unknown_name_is_refused():
    values = dict.fromkeys(RECORD_ARGS, 0)
    del values["cache_ttl"]
    with pytest.raises(TypeError, match=r"missing \['cache_ttl'\], unknown \['cache_tll'\]"):
        record_args(**values, cache_tll=0)
