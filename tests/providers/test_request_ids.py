"""Request ids: version-7 UUIDs, ordered by the millisecond they were made (the ledger's unique
index grows at its end), unique, and never repeated by a forked worker or a seeded `random`."""

from __future__ import annotations

import os
import random
import time
import uuid

import pytest

from edge.api.arrival import new_request_id

pytestmark = pytest.mark.backend_free


def test_an_id_is_a_version_7_uuid_of_the_millisecond_it_was_made():
    before = time.time_ns() // 1_000_000
    text = new_request_id()
    made = uuid.UUID(text)
    after = time.time_ns() // 1_000_000
    assert made.version == 7 and made.variant == uuid.RFC_4122
    assert text == str(made)  # the canonical form: lower-case hex, dashed 8-4-4-4-12
    assert before <= made.int >> 80 <= after


def test_ids_a_millisecond_apart_sort_in_the_order_they_were_made():
    ids = []
    for _ in range(5):
        ids.append(new_request_id())
        time.sleep(0.002)
    assert sorted(ids) == ids


def test_ten_thousand_ids_are_all_different_even_with_random_seeded():
    random.seed(0)  # as a test or Hypothesis may: the ids don't come from this generator
    first = [new_request_id() for _ in range(5000)]
    random.seed(0)
    second = [new_request_id() for _ in range(5000)]
    assert len(set(first + second)) == 10_000


def test_a_forked_worker_makes_ids_of_its_own():
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the worker: its next ids, to the parent
        os.close(read)
        os.write(write, " ".join(new_request_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    parents = {_random_part(new_request_id()) for _ in range(100)}
    with os.fdopen(read) as pipe:
        childs = {_random_part(made) for made in pipe.read().split()}
    os.waitpid(child, 0)
    # Not the same random bits: the time alone would tell ids made a millisecond apart apart.
    assert len(childs) == 100 and not parents & childs


def _random_part(made: str) -> int:
    return uuid.UUID(made).int & ((1 << 80) - 1)
