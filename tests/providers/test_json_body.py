"""A request body's own checks (`edge.api.json_body.json_object`): its depth, at the very edge,
whether or not a body's brackets let the walk be skipped."""

from __future__ import annotations

import json

import pytest

from edge.api.json_body import MAX_DEPTH, ApiError, json_object

pytestmark = pytest.mark.backend_free


def nested(lists: int) -> bytes:
    """An object whose one value is `lists` lists deep, around a number."""
    return b'{"a": ' + b"[" * lists + b"1" + b"]" * lists + b"}"


def test_a_body_as_deep_as_allowed_is_taken():
    # The number sits at depth MAX_DEPTH (the object is 1): fewer brackets than MAX_DEPTH.
    body = nested(MAX_DEPTH - 2)

    assert json_object(body) == json.loads(body)


def test_one_level_deeper_is_refused():
    problem = json_object(nested(MAX_DEPTH - 1))

    assert isinstance(problem, ApiError) and "nested" in problem.message


def test_brackets_inside_strings_only_make_the_body_walked():
    body = json.dumps({"prompt": "[" * 40 + "{" * 40, "task": [[["x"]]]}).encode()

    assert json_object(body) == json.loads(body)


def test_a_lone_surrogate_is_found_in_a_shallow_body():
    problem = json_object(b'{"prompt": "Hi \\ud800"}')

    assert isinstance(problem, ApiError) and "surrogate" in problem.message
