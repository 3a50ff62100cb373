"""Prometheus metrics: what each request counts as it ends. What a scrape reads besides, and
`GET /metrics` itself, are in `edge/metrics_scrape.py`.

- **Counted** here, by every serving process (`note_call`, from
  `runtime/outcomes.py` `record_call`): requests by provider, tier, outcome and
  whether a cloud provider answered (the cloud share); each provider call's latency; a streamed
  answer's time to first token. In-memory increments, nothing else on the request's path.
- **Read at scrape time**, the same whichever process answers: breakers, health and budgets
  from the state store, alert events from the database, the ledger's files from the disk. The
  ledger's queue is each process's own memory, so each process publishes it (below).

**Several processes: prometheus-client's multi-process mode**, chosen by measurement (timeit,
best of 5 × 200,000; prometheus-client 0.26, CPython 3.11, this project's 2-core machine):

| per request: one counter and one histogram | cost |
|---|---|
| single-process registry, `labels()` each time | 2.6 µs |
| multi-process mode (a mmap'ed file per process), `labels()` each time | 4.0 µs |
| `count_request` below (label children cached), single-process / multi-process | 1.4 / 2.7 µs |
| a dict increment (the hot path of a shared-store design that flushes in batches) | 0.07 µs |
| an awaited Redis `HINCRBY` (counting in the shared store on the request's path) | 56 µs |

| per scrape | cost |
|---|---|
| multi-process merge of 1 / 4 / 16 / 64 processes' files | 1.1 / 1.7 / 4.0 / 13.4 ms |
| one Redis `HGETALL` of the same ~150 counters (a shared-store scrape) | 0.07 ms |

At the benchmark's bar (1,840 req/s on one core, bench/README.md) a request has ~540 µs.
Counting in Redis per request would take a tenth of that, so a shared-store design must count
in memory and flush from a task of its own every second: it would save ~2.6 µs a request
(0.5 %) and a few ms a scrape, but its counts would lag by the flush, a crashed process would
lose its last second, a scrape would find nothing while Redis is down, and that flusher would
be this module's to get right. Multi-process mode's increment is a store into a shared memory
page (no system call once a label set has its slot, made the first time it is seen; nothing
waited for; on tmpfs nothing reaches a disk): exact at once, a dead worker's counts kept, no
Redis needed. Its price is operational: PROMETHEUS_MULTIPROC_DIR (on tmpfs) must be set and
emptied before the workers start (`make run` and the production commands of
docs/operations.md do), or the files of past processes pile up and slow the scrape (the 64-file
figure). It covers one machine: Prometheus scrapes each machine and sums the counters; the
scrape-time gauges are the shared state's, the same on every machine (take their `max`).
Without the variable (one process: `make run`, the tests) the counters are this process's.
Celery workers count nothing: what they do (alert deliveries) is read from its rows.
"""

from __future__ import annotations

import asyncio
import functools
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.aio import LoopLocal, spawn
from gateway.routing.cascade import RouteResult
from gateway.routing.walk import AttemptOutcome, Tier
from runtime.gateway import Gateway
from runtime.ledger import LedgerWriter

# prometheus-client takes its mode from the environment when imported: the process's own.
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
# Seconds between a process's writes of its ledger queue's length, in multi-process mode.
PUBLISH_EVERY_S = 1.0
# A provider call takes from tens of milliseconds (a warm local model) to a minute (a long answer).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
# The tiers whose answer a provider call gave (the cache's, the static and degraded: none).
_CALLED_TIERS = frozenset({Tier.PRIMARY, Tier.SECONDARY})
_NOT_CALLED = frozenset({AttemptOutcome.SKIPPED, AttemptOutcome.CANCELLED})

# This process's metrics, kept off prometheus-client's default registry (and its process
# collectors, which multi-process mode can't merge).
COUNTED = CollectorRegistry()
REQUESTS = Counter(
    "failover_requests",
    "Routed requests (one call record each) by the provider that answered ('none': the cache, "
    "static, degraded or an error), tier and outcome; cloud: a cloud provider answered.",
    ["provider", "tier", "outcome", "cloud"],
    registry=COUNTED,
)
PROVIDER_LATENCY = Histogram(
    "failover_provider_latency_seconds",
    "Provider calls until their answer or failure; a streamed answer is timed to its first "
    "token, in failover_stream_first_token_seconds instead.",
    ["provider", "outcome"],
    buckets=LATENCY_BUCKETS,
    registry=COUNTED,
)
FIRST_TOKEN = Histogram(
    "failover_stream_first_token_seconds",
    "Time to first token of streamed answers, by the provider that answered.",
    ["provider"],
    buckets=FIRST_TOKEN_BUCKETS,
    registry=COUNTED,
)
LEDGER_QUEUE = Gauge(
    "failover_ledger_queue_rows",
    "Call records waiting in the serving processes' memory for the database.",
    registry=COUNTED,
    multiprocess_mode="livesum",  # the live processes' sum; a dead one's is dropped
)


# Label children cached: `labels()` checks its arguments on every call, most of its cost (the
# table above). Bounded by the configured providers × tiers × outcomes.
@functools.cache
def _requests(provider: str, tier: str, outcome: str, cloud: bool) -> Counter:
    return REQUESTS.labels(provider, tier, outcome, "true" if cloud else "false")


@functools.cache
def _latency(provider: str, ok: bool) -> Histogram:
    return PROVIDER_LATENCY.labels(provider, "ok" if ok else "error")


@functools.cache
def _first_token(provider: str) -> Histogram:
    return FIRST_TOKEN.labels(provider)


def count_request(result: RouteResult, *, cloud: bool) -> None:
    """Count one finished request and the provider calls it made."""
    _requests(result.provider or "none", result.tier, result.outcome, cloud).inc()
    answering = None
    if result.stream is not None:
        # The call that streamed the answer: its latency is its time to first token (the
        # cascade's `finish_stream` judges it by that).
        answering = next(
            (
                attempt
                for attempt in reversed(result.attempts)
                if attempt.provider == result.provider and attempt.outcome not in _NOT_CALLED
            ),
            None,
        )
    for attempt in result.attempts:
        if attempt.outcome in _NOT_CALLED:
            continue
        seconds = attempt.latency_ms / 1000
        if attempt is answering:
            _first_token(attempt.provider).observe(seconds)
        else:
            _latency(attempt.provider, attempt.outcome == "ok").observe(seconds)


def note_call(gateway: Gateway, result: RouteResult) -> None:
    """`record_call`'s hook. Whether a cloud provider answered comes from the snapshot in
    memory; a provider gone from it since counts as local."""
    cloud = False
    if result.provider and result.tier in _CALLED_TIERS:
        snapshot = gateway.snapshots.latest()
        provider = snapshot.provider(result.provider) if snapshot is not None else None
        cloud = provider is not None and not provider.is_local
    count_request(result, cloud=cloud)
    if MULTIPROCESS:
        _keep_publishing(gateway.ledger)


_publishers: LoopLocal[list[asyncio.Task[None]]] = LoopLocal(list)


def _keep_publishing(ledger: LedgerWriter) -> None:
    """Multi-process mode: no other process can read this one's ledger, so this one writes
    its queue's length into its own file every second, from a task of its own."""
    tasks = _publishers.get()
    if not tasks or tasks[0].done():
        tasks[:] = [spawn(_publish(ledger))]


async def _publish(ledger: LedgerWriter) -> None:
    while True:
        LEDGER_QUEUE.set(len(ledger))
        await asyncio.sleep(PUBLISH_EVERY_S)
