"""JSON on the request path: orjson (compact, UTF-8, several times faster than the standard
library's encoder and decoder), with the standard library's answer wherever orjson would give
none. Every request encodes a provider's request, its cache key, its cache entry and its answer,
and decodes the provider's answer (docs/performance.md).

What orjson refuses goes the standard library's way, so nothing that encoded or decoded before
fails now: an integer past 64 bits, a string with a lone surrogate, a key that isn't a string,
NaN or Infinity in a body. Two differences are kept on purpose: a decoded integer past 64 bits
comes back as the nearest float (orjson's reading, where it can only be a count gone wrong),
and a number written with an exponent reads 1e-7 where the standard library wrote 1e-07.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """`value` as compact JSON, UTF-8."""
    try:
        return orjson.dumps(value)
    except TypeError:
        # Escaped to ASCII: a lone surrogate encodes too, as it always has.
        return json.dumps(value, separators=(",", ":")).encode()


def dumps_text(value: Any) -> str:
    """`dumps`, as text."""
    return dumps(value).decode()


def dumps_with(value: Any, encoder: type[json.JSONEncoder]) -> bytes:
    """`value` as compact JSON, UTF-8, what `json.dumps(value, cls=encoder)` says of the types
    orjson doesn't know and of the ones it would write its own way (datetimes, dataclasses):
    `encoder`'s `default` for each, and `encoder` itself for a value orjson refuses whole."""
    try:
        return orjson.dumps(
            value,
            default=_default_of(encoder),
            option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS,
        )
    except TypeError:
        return json.dumps(value, cls=encoder, separators=(",", ":")).encode()


# Each encoder's `default`, its instance made once.
_DEFAULTS: dict[type[json.JSONEncoder], Callable[[Any], Any]] = {}


def _default_of(encoder: type[json.JSONEncoder]) -> Callable[[Any], Any]:
    default = _DEFAULTS.get(encoder)
    if default is None:
        default = _DEFAULTS[encoder] = encoder().default
    return default


def loads(data: bytes | str) -> Any:
    """The value `data` holds; ValueError (RecursionError for one nested past Python's limit)
    where it holds no JSON, as `json.loads` says."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
