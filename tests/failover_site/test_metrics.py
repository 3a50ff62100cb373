# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""`GET /metrics`: the Prometheus text format, counted by real traffic through the fake
providers, read from the state store, the database and the disk at scrape time, closed unless a
token or an address list opens it (across processes: test_metrics_processes.py)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml
from asgiref.sync import sync_to_async
from prometheus_client.parser import text_string_to_metric_families

from alerts.models import AlertEvent
from runtime.ledger import rejected_dir, spill_dir
from tests.factories import AUTH, make_budget
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    api,
    ask,
    clock,
    gateway,
    ledger_rows,
    live_url,
    primary,
    providers_configured,
    secondary,
)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "the-suites-metrics-token-0123456789abcdef"
SCRAPER = {"Authorization": f"Bearer {TOKEN}"}
HELLO = [{"role": "user", "content": "Say hello."}]

pytestmark = pytest.mark.django_db(transaction=True)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def token_only(settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = []


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """Every sample by name and labels, and every family's type, as Prometheus reads them."""
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, types


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics", headers=SCRAPER)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)[0]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


# What real traffic counts ----------------------------------------------------------------


async def test_requests_are_counted_by_provider_tier_and_outcome(api, token_only):
    before = await scrape(api)
    for _ in range(2):
        assert (await ask(api)).json()["tier"] == "primary"
    after = await scrape(api)
    served = {"provider": "ollama-local", "tier": "primary", "outcome": "ok", "cloud": "false"}
    assert moved(before, after, "failover_requests_total", **served) == 2
    assert moved(before, after, "failover_requests_total") == 2
    latency = {"provider": "ollama-local", "outcome": "ok"}
    assert moved(before, after, "failover_provider_latency_seconds_count", **latency) == 2
    assert moved(before, after, "failover_provider_latency_seconds_bucket", le="+Inf") == 2


async def test_a_failover_counts_the_cloud_answer_the_failed_call_and_the_budget_spend(
    api, gateway, primary, token_only
):
    budget = await sync_to_async(make_budget)(cap=Decimal("1"))
    await gateway.snapshots.refresh()  # the budget made outside the admin: read it now
    primary.set_fault(mode="error")
    before = await scrape(api)
    assert (await ask(api)).json()["tier"] == "secondary"
    after = await scrape(api)
    answered = {"provider": "openai-cloud", "tier": "secondary", "outcome": "ok", "cloud": "true"}
    assert moved(before, after, "failover_requests_total", **answered) == 1
    failed = {"provider": "ollama-local", "outcome": "error"}
    assert moved(before, after, "failover_provider_latency_seconds_count", **failed) == 1
    [record] = await ledger_rows(gateway)
    assert record.cost > 0
    used = value(after, "failover_budget_used_ratio", budget=str(budget.pk), scope="all")
    assert used == pytest.approx(float(record.cost) / 1.0)
    assert value(after, "failover_budget_cap", budget=str(budget.pk)) == 1.0
    assert value(after, "failover_cloud_share_target_ratio") == pytest.approx(0.05)


async def test_a_stream_is_timed_to_its_first_token(api, live_url, token_only):
    before = await scrape(api)
    body = {"model": "auto", "messages": HELLO, "stream": True}
    async with (
        httpx.AsyncClient(timeout=30, headers=AUTH) as http,
        http.stream("POST", live_url + "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        _ = [line async for line in response.aiter_lines()]
    # The stream's bookkeeping runs after its last byte: poll for it.
    deadline = time.monotonic() + 10
    while True:
        after = await scrape(api)
        if moved(before, after, "failover_requests_total", tier="primary"):
            break
        assert time.monotonic() < deadline, "the stream was never counted"
        await asyncio.sleep(0.05)
    ttft = {"provider": "ollama-local"}
    assert moved(before, after, "failover_stream_first_token_seconds_count", **ttft) == 1
    assert moved(before, after, "failover_provider_latency_seconds_count", **ttft) == 0


# What a scrape reads -------------------------------------------------------------------------


async def test_breakers_and_health_are_read_from_the_state_store(api, primary, token_only):
    primary.set_fault(mode="error")
    for _ in range(3):  # three failures in a row open the primary's breaker
        await ask(api)
    samples = await scrape(api)
    local, cloud = {"provider": "ollama-local"}, {"provider": "openai-cloud"}
    assert value(samples, "failover_breaker_state", **local, state="open") == 1
    assert value(samples, "failover_breaker_state", **local, state="closed") == 0
    assert value(samples, "failover_breaker_state", **cloud, state="closed") == 1
    assert value(samples, "failover_provider_health", **local, health="down") == 1
    assert value(samples, "failover_provider_health", **cloud, health="healthy") == 1
    assert value(samples, "failover_breaker_mode", **local, mode="auto") == 1
    assert value(samples, "failover_provider_info", **local, primary="true", cloud="false") == 1
    assert value(samples, "failover_provider_info", **cloud, primary="false", cloud="true") == 1
    assert value(samples, "failover_state_store_up") == 1
    assert value(samples, "failover_scrape_source_up", source="configuration") == 1


async def test_the_ledger_queue_is_the_rows_waiting_to_be_written(api, gateway, token_only):
    gateway.ledger.FLUSH_EVERY_S = 60  # the rows wait in memory until flushed here
    for _ in range(2):
        await ask(api)
    assert value(await scrape(api), "failover_ledger_queue_rows") == 2
    await gateway.ledger.flush()
    assert value(await scrape(api), "failover_ledger_queue_rows") == 0


async def test_ledger_files_on_disk_are_counted(api, token_only):
    before = await scrape(api)
    made = [spill_dir() / "0-metrics-test.jsonl", rejected_dir() / "0-metrics-test.jsonl"]
    try:
        for path in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")
        after = await scrape(api)
    finally:
        for path in made:
            path.unlink(missing_ok=True)
    assert moved(before, after, "failover_ledger_spill_files") == 1
    assert moved(before, after, "failover_ledger_rejected_files") == 1


async def test_alert_events_are_counted_by_kind_and_outcome_from_the_database(api, token_only):
    def events() -> None:
        for status in ("delivered", "delivered", "failed"):
            AlertEvent.objects.create(
                kind="test", severity="info", key="metrics", title="Test", status=status
            )

    await sync_to_async(events)()
    samples = await scrape(api)
    assert value(samples, "failover_alert_events", kind="test", status="delivered") == 2
    assert value(samples, "failover_alert_events", kind="test", status="failed") == 1
    assert value(samples, "failover_scrape_source_up", source="database") == 1


# Who may scrape --------------------------------------------------------------------------------


async def test_with_neither_a_token_nor_addresses_metrics_is_closed(api, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_IPS = "", []
    response = await api.get("/metrics", headers=SCRAPER)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "metrics_not_configured"


async def test_a_missing_or_wrong_token_is_a_401_naming_the_scheme(api, token_only):
    api.headers.pop("Authorization")
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, AUTH):
        response = await api.get("/metrics", headers=headers)
        assert response.status_code == 401, headers
        assert response.json()["error"]["code"] == "invalid_metrics_token"
        assert response.headers["WWW-Authenticate"].startswith("Bearer ")
    assert (await api.get("/metrics", headers=SCRAPER)).status_code == 200
    assert (await api.post("/metrics", headers=SCRAPER)).status_code == 405


async def test_the_address_list_lets_in_its_networks_only(live_url, settings):
    settings.METRICS_TOKEN = ""
    async with httpx.AsyncClient(base_url=live_url, timeout=10) as http:  # from 127.0.0.1
        settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
        refused = await http.get("/metrics")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "address_not_allowed"
        settings.METRICS_ALLOWED_IPS = ["127.0.0.0/8"]
        assert (await http.get("/metrics")).status_code == 200
        # Behind a proxy, the address it saw, as TRUSTED_PROXY_HOPS says (what the API uses).
        settings.METRICS_ALLOWED_IPS, settings.TRUSTED_PROXY_HOPS = ["10.0.0.0/8"], 1
        forwarded = {"X-Forwarded-For": "192.0.2.7, 10.1.2.3"}
        assert (await http.get("/metrics", headers=forwarded)).status_code == 200
        forged = {"X-Forwarded-For": "10.1.2.3, 192.0.2.7"}
        assert (await http.get("/metrics", headers=forged)).status_code == 403


async def test_with_both_set_both_are_required(live_url, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_IPS = TOKEN, ["127.0.0.1"]
    async with httpx.AsyncClient(base_url=live_url, timeout=10) as http:
        assert (await http.get("/metrics")).status_code == 401
        assert (await http.get("/metrics", headers=SCRAPER)).status_code == 200
        settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
        assert (await http.get("/metrics", headers=SCRAPER)).status_code == 403


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"METRICS_TOKEN": "too-short"}, "METRICS_TOKEN must be at least 32 characters"),
        ({"METRICS_ALLOWED_IPS": "10.0.0.0/8,not-a-network"}, "METRICS_ALLOWED_IPS:"),
        ({"PROMETHEUS_MULTIPROC_DIR": "/nonexistent/metrics"}, "is not a directory"),
    ],
)
def test_settings_refuse_a_weak_token_a_bad_network_and_a_missing_directory(
    env, complaint, tmp_path
):
    clean = {"PATH": os.environ["PATH"], "ENV_FILE": "", "DATA_DIR": str(tmp_path), **env}
    started = subprocess.run(
        [sys.executable, "-c", "import django, os; "
         "os.environ['DJANGO_SETTINGS_MODULE'] = 'failover_site.settings'; django.setup()"],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr and complaint in started.stderr


# The documents use the names a scrape has -------------------------------------------------------

SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum")}


def names_in(expression: str) -> set[str]:
    """The metric names an expression uses (recording rules' names have colons: not these)."""
    return set(re.findall(r"\bfailover_[a-z0-9_]+\b", expression))


def grafana_expressions() -> list[str]:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    assert dashboard["panels"], "the dashboard has no panels"
    expressions = []
    for panel in dashboard["panels"]:
        assert panel.get("title") and panel.get("type"), panel
        for target in panel.get("targets", []):
            expressions.append(target["expr"])
    return expressions


def alert_rules() -> list[dict]:
    """The rule file, checked as promtool would check its shape."""
    document = yaml.safe_load((ROOT / "docs" / "prometheus-alerts.yml").read_text())
    rules = []
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for rule in group["rules"]:
            assert ("alert" in rule) != ("record" in rule), rule
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule
            assert rule["expr"].count("{") == rule["expr"].count("}"), rule
            if "alert" in rule:
                assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule
                assert rule["labels"]["severity"] in ("warning", "critical"), rule
                assert rule["annotations"]["summary"], rule
            else:
                assert re.fullmatch(r"[a-z_]+(:[a-z0-9_]+)+", rule["record"]), rule
        rules += group["rules"]
    return rules


async def test_the_dashboard_and_the_alert_rules_use_names_a_real_scrape_has(
    api, gateway, token_only
):
    await sync_to_async(make_budget)(cap=Decimal("5"))
    await gateway.snapshots.refresh()
    await ask(api)
    response = await api.get("/metrics", headers=SCRAPER)
    samples, types = parse(response.text)
    exposed = {name for name, _ in samples} | set(types)
    for family, kind in types.items():
        exposed |= {family + suffix for suffix in SUFFIXES.get(kind, ())}
    rules = alert_rules()
    assert {"FailoverPrimaryNotServing", "CloudShareAboveTarget", "BudgetAt85Percent"} <= {
        rule.get("alert") for rule in rules
    }
    used = set()
    for expression in grafana_expressions() + [rule["expr"] for rule in rules]:
        used |= names_in(expression)
    assert used, "no metric names found in the documents"
    assert used <= exposed, sorted(used - exposed)
