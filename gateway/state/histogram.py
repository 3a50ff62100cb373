"""The latency histogram kept per statistics bucket, for the status page's p95.

The bins are geometric: bin k ≥ 1 holds the latencies in (R^(k-1), R^k] ms with R = 1.05, bin 0
everything up to 1 ms and the last bin everything past `TOP_MS`. A bin is reported as its
geometric centre to three significant figures, so the p95 shown is within 3 % (√R − 1 ≈ 2.5 %,
and the rounding) of the call that holds it anywhere from 1 ms to `TOP_MS` (274 bins).
Counting a call is one integer increment of one bin, and a bucket holds only the bins it saw
(a Redis hash field `l<k>`, a dict entry in memory): a provider's calls fill a few dozen at most.

The breaker never needs this: it counts calls over its p95 limit exactly (`Sample.over_p95`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

RATIO = 1.05
TOP_MS = 600_000.0  # ten minutes: longer than any request's deadline
_LOG_RATIO = math.log(RATIO)
TOP_BIN = math.ceil(math.log(TOP_MS) / _LOG_RATIO) + 1  # the overflow bin, past TOP_MS
# A bin's field in a bucket; `h<k>` named the coarse bins before these, so old buckets are
# simply not read (they expire with their window).
FIELD_PREFIX = "l"
P95_PERCENT = 95


def latency_bin(latency_ms: float) -> int:
    """The bin a call of `latency_ms` counts in."""
    if latency_ms <= 1.0:
        return 0
    if latency_ms > TOP_MS:
        return TOP_BIN
    return min(TOP_BIN - 1, max(1, math.ceil(math.log(latency_ms) / _LOG_RATIO)))


def bin_ms(index: int) -> float:
    """What a bin is reported as: its geometric centre (1 ms for bin 0, `TOP_MS` past the top,
    where the true value is only known to be longer)."""
    if index <= 0:
        return 1.0
    if index >= TOP_BIN:
        return TOP_MS
    return RATIO ** (index - 0.5)


def _three_figures(value: float) -> float:
    """A bin's centre to three significant figures: 5,300 ms rather than 5,301.27 ms."""
    return float(f"{value:.3g}")


def bin_field(index: int) -> str:
    return f"{FIELD_PREFIX}{index}"


def bins_of(bucket: Mapping[str, int | str]) -> Iterable[tuple[int, int]]:
    """The (bin, count) pairs of one bucket's fields; other fields are skipped."""
    for name, count in bucket.items():
        if name.startswith(FIELD_PREFIX) and name[1:].isdigit():
            yield int(name[1:]), int(count)


def p95_ms(histogram: Mapping[int, int]) -> float | None:
    """The latency at or under which 95 % of the calls fall (nearest rank: the value of the
    ⌈0.95·n⌉-th fastest call, as its bin reports it); None with no calls."""
    total = sum(histogram.values())
    if not total:
        return None
    needed = -(-P95_PERCENT * total // 100)  # ⌈0.95·n⌉ in integers: no float rounding
    running = 0
    for index in sorted(histogram):
        running += histogram[index]
        if running >= needed:
            return _three_figures(bin_ms(index))
    raise AssertionError("unreachable: the running count reaches the total")
