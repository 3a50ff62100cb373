"""`GET /metrics`: the Prometheus text format, for a scraper that is let in.

Let in by `METRICS_TOKEN` (`Authorization: Bearer …`, compared in constant time) and/or
`METRICS_ALLOWED_IPS` (the caller's address as `TRUSTED_PROXY_HOPS` says, matched as
`/readyz`'s detail is); with both set both are required, with neither `/metrics` is closed
(403): breaker states, budgets and traffic describe the business, and a default that opens them
to whatever the proxy forwards would be the unsafe one.

A scrape gives the counted metrics (`runtime/metrics.py`: this process's, or every
process's files in multi-process mode) and what it reads itself: every provider's breaker,
health and budget spend in one `StateStore.status_read`, as `GET /api/v1/status` reads them;
alert events by kind and outcome (deliveries happen in Celery workers; their outcome is each
event's row, so one grouped count is right across every process); the ledger's files on disk.
A part that can't be read is left out and said so (`failover_scrape_source_up`): the counters
are still worth the scrape.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from alerts.models import AlertEvent
from edge.api.access import client_address, presented_key
from edge.api.arrival import NOT_STARTED, error_response
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from edge.probes import address_allowed
from gateway.engine.breaker import Mode, State
from gateway.engine.config import Snapshot
from gateway.engine.health import DEGRADED, DISABLED, DOWN, HEALTHY, provider_health
from gateway.routing.settling import windows
from gateway.state.contract import StatusRead, spend_key
from runtime.background import run_db
from runtime.gateway import Gateway, NotServing, gateway_of
from runtime.ledger import LedgerWriter, rejected_dir, spill_dir
from runtime.metrics import COUNTED, LEDGER_QUEUE

logger = logging.getLogger(__name__)

REALM = 'Bearer realm="failover-metrics"'
# The classic text format (what generate_latest writes), which every Prometheus reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_HEALTH_LEVELS = (HEALTHY, DEGRADED, DOWN, DISABLED)
_BUDGET_LABELS = ["budget", "scope", "period", "unit", "provider", "client"]


# A scrape changes nothing and reads no form: another method is a 405 naming GET, not the CSRF
# check's 403 page (as the probes).
@csrf_exempt
@require_GET
async def metrics(request: HttpRequest) -> HttpResponse:
    refusal = access_refusal(request)
    if refusal is not None:
        return refusal
    try:
        gateway = gateway_of(request)
    except NotServing as exc:
        logger.error("%s", exc)
        return error_response(NOT_STARTED)
    return HttpResponse(await scrape(gateway), content_type=CONTENT_TYPE)


def access_refusal(request: HttpRequest) -> JsonAnswer | None:
    token: str = settings.METRICS_TOKEN
    allowed: list[str] = settings.METRICS_ALLOWED_IPS
    if not token and not allowed:
        return error_response(
            ApiError(
                403,
                "metrics_not_configured",
                "/metrics is closed: set METRICS_TOKEN or METRICS_ALLOWED_IPS to open it.",
            )
        )
    if allowed and not address_allowed(client_address(request), allowed):
        return error_response(
            ApiError(403, "address_not_allowed", "This address may not read /metrics.")
        )
    if token:
        presented = (presented_key(request) or "").encode()
        if not hmac.compare_digest(presented, token.encode()):
            response = error_response(
                ApiError(
                    401,
                    "invalid_metrics_token",
                    "Send the metrics token as 'Authorization: Bearer <METRICS_TOKEN>'.",
                )
            )
            response["WWW-Authenticate"] = REALM
            return response
    return None


async def scrape(gateway: Gateway) -> bytes:
    reading = await read_state(gateway)
    # The ORM, the mmap'ed files and the disk: off the event loop.
    return await run_db(exposition, reading, gateway.ledger)


@dataclass(frozen=True)
class StateReading:
    snapshot: Snapshot
    read: StatusRead
    spend_keys: dict[int, str]  # budget id → its counter for the current period
    store_ok: bool


async def read_state(gateway: Gateway) -> StateReading | None:
    """The configuration, and every provider's breaker, health and budget spend in one round
    trip to the store; None when there is no configuration to read (its first build failed)."""
    try:
        snapshot = await gateway.snapshots.current()
    except Exception:  # whatever stopped the build: the counters are still worth a scrape
        logger.exception("metrics: the configuration could not be read")
        return None
    policy = snapshot.policy
    now = gateway.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now, policy.time_zone)[0] for b in snapshot.budgets}
    read = await gateway.store.status_read(
        [provider.name for provider in snapshot.providers],
        windows=windows(policy),
        now=now,
        spend_keys=keys.values(),
    )
    return StateReading(snapshot, read, keys, bool(gateway.store.health().get("ok")))


def _gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _flag(value: bool) -> str:
    return "true" if value else "false"


def provider_families(reading: StateReading) -> list[Metric]:
    snapshot, read = reading.snapshot, reading.read
    primary = snapshot.primary
    info = _gauge(
        "failover_provider_info",
        "1 for each enabled provider: its kind, model, whether it is a cloud provider and "
        "whether it is the primary (the first by priority).",
        ["provider", "kind", "model", "cloud", "primary"],
    )
    breaker = _gauge("failover_breaker_state", "1 for the breaker's state.", ["provider", "state"])
    mode = _gauge(
        "failover_breaker_mode",
        "1 for the operator's mode: auto, disabled (forced open) or forced_closed.",
        ["provider", "mode"],
    )
    failures = _gauge("failover_breaker_consecutive_failures", "Failures in a row.", ["provider"])
    health = _gauge(
        "failover_provider_health",
        "1 for the provider's health, as GET /api/v1/status says it.",
        ["provider", "health"],
    )
    for provider in snapshot.providers:
        name, state = provider.name, read.breakers[provider.name]
        is_primary = primary is not None and primary.name == name
        info.add_metric(
            [name, provider.kind, provider.model, _flag(not provider.is_local), _flag(is_primary)],
            1,
        )
        for value in State:
            breaker.add_metric([name, value.value], int(state.state == value))
        for choice in Mode:
            mode.add_metric([name, choice.value], int(state.mode == choice))
        failures.add_metric([name], state.consecutive_failures)
        verdict = provider_health(state, recent_failures=read.summaries[name].failures)
        for level in _HEALTH_LEVELS:
            health.add_metric([name, level], int(verdict == level))
    store = _gauge(
        "failover_state_store_up",
        "1 while the shared state store answers (0: each process on its local state).",
    )
    store.add_metric([], int(reading.store_ok))
    return [info, breaker, mode, failures, health, store]


def budget_families(reading: StateReading) -> list[Metric]:
    snapshot, spent_by_key = reading.snapshot, reading.read.spent
    used = _gauge(
        "failover_budget_used_ratio",
        "Each budget's spend this period over its cap (1: at the cap).",
        _BUDGET_LABELS,
    )
    spent = _gauge(
        "failover_budget_spent",
        "Each budget's spend this period, in the policy's currency or in tokens (unit).",
        _BUDGET_LABELS,
    )
    cap = _gauge("failover_budget_cap", "Each budget's cap, in its unit.", _BUDGET_LABELS)
    for budget in snapshot.budgets:
        labels = [str(budget.id), budget.scope, budget.period, budget.unit]
        labels += [budget.provider, budget.client]
        amount, limit = spent_by_key.get(reading.spend_keys[budget.id], 0.0), float(budget.cap)
        used.add_metric(labels, amount / limit if limit else 0.0)
        spent.add_metric(labels, amount)
        cap.add_metric(labels, limit)
    target = _gauge(
        "failover_cloud_share_target_ratio",
        "The policy's cloud share target (cloud_share_target_pct / 100).",
    )
    target.add_metric([], snapshot.policy.cloud_share_target_pct / 100)
    return [used, spent, cap, target]


def _files_in(directory: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        return sum(1 for _ in directory.glob("*.jsonl"))
    return 0


def database_families() -> list[Metric]:
    """Alert events by kind and outcome, and the ledger's files (ORM and disk)."""
    events = _gauge(
        "failover_alert_events",
        "Alert events kept, by kind and what became of their delivery (status).",
        ["kind", "status"],
    )
    # order_by(): the model's ordering would otherwise join the GROUP BY.
    counts = AlertEvent.objects.order_by().values_list("kind", "status").annotate(n=Count("id"))
    for kind, status, n in counts:
        events.add_metric([kind, status], n)
    spill = _gauge(
        "failover_ledger_spill_files",
        "Files of call records waiting on disk for the database (DATA_DIR/ledger-spill).",
    )
    spill.add_metric([], _files_in(spill_dir()))
    rejected = _gauge(
        "failover_ledger_rejected_files",
        "Files of call records the database refused, set aside (DATA_DIR/ledger-rejected).",
    )
    rejected.add_metric([], _files_in(rejected_dir()))
    return [events, spill, rejected]


def forget_dead_processes(directory: str) -> None:
    """Drop the live gauges of processes that are gone; their counters stay (what a dead
    worker counted still happened)."""
    for path in Path(directory).glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            mark_process_dead(int(pid), directory)
        except PermissionError:
            pass  # alive, another user's


class _Scrape:
    """One scrape: the counted metrics, then the figures read for it."""

    def __init__(self, counted: Collector, read: list[Metric]) -> None:
        self.counted, self.read = counted, read

    def collect(self) -> Iterator[Metric]:
        yield from self.counted.collect()
        yield from self.read


def exposition(reading: StateReading | None, ledger: LedgerWriter) -> bytes:
    """The scrape's text (reads the database, the disk and in multi-process mode the files)."""
    families = [] if reading is None else provider_families(reading) + budget_families(reading)
    up = _gauge("failover_scrape_source_up", "1 when the scrape could read it.", ["source"])
    up.add_metric(["configuration"], int(reading is not None))
    try:
        families += database_families()
        up.add_metric(["database"], 1)
    except (DatabaseError, OSError):  # the database (or the disk): the rest still stands
        logger.exception("metrics: the database could not be read")
        up.add_metric(["database"], 0)
    families.append(up)
    LEDGER_QUEUE.set(len(ledger))  # this process's own, as it is now
    # Read now, not at import: the directory a scrape merges is the one the environment names.
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    counted: Collector = COUNTED
    if directory:
        forget_dead_processes(directory)
        counted = MultiProcessCollector(None, path=directory)
    return generate_latest(_Scrape(counted, families))
