"""The call ledger in the admin: filters that narrow it, search, and a readable detail page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.templatetags.admin_list import result_headers
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_call_record, make_user

pytestmark = pytest.mark.django_db

LEDGER = "admin:billing_callrecord_changelist"


@pytest.fixture
def auditor(client):
    """Staff who may read the ledger and nothing else."""
    client.force_login(make_user(perms=("billing.view_callrecord",)))
    return client


def listed(client, **params) -> set[int]:
    response = client.get(reverse(LEDGER), params)
    assert response.status_code == 200
    return {record.pk for record in response.context["cl"].result_list}


def detail(client, record) -> str:
    response = client.get(reverse("admin:billing_callrecord_change", args=[record.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_list_shows_the_ledger_columns(auditor):
    make_call_record(reason="primary_breaker_open", latency_ms=1234)
    response = auditor.get(reverse(LEDGER))
    headers = [header["text"] for header in result_headers(response.context["cl"])]
    assert headers == ["time", "tier", "provider", "outcome", "reason", "status", "latency", "cost"]
    page = response.content.decode()
    assert "1,234 ms" in page and "primary_breaker_open" in page


def test_the_provider_filter_lists_the_providers_in_the_ledger_and_narrows_to_one(auditor):
    local = make_call_record(final_provider="ollama-local")
    cloud = make_call_record(final_provider="openai-cloud", tier="secondary")
    static = make_call_record(final_provider="", tier="static", outcome="fallback", attempts=[])
    page = auditor.get(reverse(LEDGER)).content.decode()
    assert "?provider=ollama-local" in page and "?provider=openai-cloud" in page
    assert listed(auditor) == {local.pk, cloud.pk, static.pk}
    assert listed(auditor, provider="openai-cloud") == {cloud.pk}
    assert listed(auditor, provider="_none") == {static.pk}


def test_the_tier_outcome_and_cache_filters_each_narrow_the_list(auditor):
    primary = make_call_record(tier="primary")
    cached = make_call_record(
        tier="cache", outcome="fallback", final_provider="", cache_hit=True, attempts=[]
    )
    failed = make_call_record(tier="none", outcome="failed", final_provider="", status=503)
    assert listed(auditor, tier__exact="primary") == {primary.pk}
    assert listed(auditor, tier__exact="cache") == {cached.pk}
    assert listed(auditor, outcome__exact="failed") == {failed.pk}
    assert listed(auditor, outcome__exact="fallback") == {cached.pk}
    assert listed(auditor, cache_hit__exact="1") == {cached.pk}
    assert listed(auditor, cache_hit__exact="0") == {primary.pk, failed.pk}


def test_the_time_filter_keeps_the_last_hour_day_or_week(auditor):
    now = timezone.now()
    minutes_ago = make_call_record(created_at=now - timedelta(minutes=20))
    hours_ago = make_call_record(created_at=now - timedelta(hours=5))
    days_ago = make_call_record(created_at=now - timedelta(days=3))
    weeks_ago = make_call_record(created_at=now - timedelta(days=10))
    assert listed(auditor, recent="1h") == {minutes_ago.pk}
    assert listed(auditor, recent="24h") == {minutes_ago.pk, hours_ago.pk}
    assert listed(auditor, recent="7d") == {minutes_ago.pk, hours_ago.pk, days_ago.pk}
    assert listed(auditor) == {minutes_ago.pk, hours_ago.pk, days_ago.pk, weeks_ago.pk}


def test_the_date_hierarchy_narrows_to_a_day(auditor):
    now = timezone.now()
    make_call_record(created_at=now)
    old = make_call_record(created_at=now - timedelta(days=10))
    day = timezone.localtime(old.created_at).date()
    assert listed(
        auditor,
        created_at__year=day.year,
        created_at__month=day.month,
        created_at__day=day.day,
    ) == {old.pk}


def test_search_finds_a_client_by_part_of_its_name(auditor):
    acme = make_call_record(client="acme-web")
    make_call_record(client="globex-mobile")
    assert listed(auditor, q="acme") == {acme.pk}


def test_search_finds_a_request_by_its_id_and_by_task_or_reason(auditor):
    record = make_call_record(task="summarize", reason="primary_breaker_open")
    make_call_record(task="translate", reason="")
    assert listed(auditor, q=str(record.request_id)) == {record.pk}
    assert listed(auditor, q="summarize") == {record.pk}
    assert listed(auditor, q="breaker") == {record.pk}


def test_the_detail_page_shows_each_attempt_as_a_table_row(auditor):
    record = make_call_record(
        client="acme-web",
        final_provider="anthropic-cloud",
        tier="secondary",
        attempts=[
            {
                "provider": "ollama-local",
                "outcome": "error",
                "error_class": "timeout",
                "latency_ms": 8001,
            },
            {
                "provider": "openai-cloud",
                "outcome": "error",
                "error_class": "rate_limited",
                "status": 429,
                "detail": "<b>Retry-After: 30</b>",
            },
            {"provider": "anthropic-cloud", "outcome": "ok", "status": 200, "latency_ms": 900},
        ],
    )
    page = detail(auditor, record)
    table = page[page.index('<table class="ledger-attempts">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 4  # a header and three attempts
    assert "<td>ollama-local</td><td>error</td><td>timeout</td><td>—</td><td>8,001 ms</td>" in table
    assert "<td>openai-cloud</td><td>error</td><td>rate_limited</td><td>429</td>" in table
    assert "&lt;b&gt;Retry-After: 30&lt;/b&gt;" in table
    assert "<td>anthropic-cloud</td><td>ok</td><td>—</td><td>200</td><td>900 ms</td>" in table
    assert 'name="_save"' not in page


def test_a_request_without_attempts_says_so(auditor):
    record = make_call_record(tier="static", outcome="fallback", final_provider="", attempts=[])
    assert "No provider was tried" in detail(auditor, record)


def test_the_detail_page_links_to_the_same_clients_requests(auditor):
    record = make_call_record(client="acme web")
    same = make_call_record(client="acme web")
    make_call_record(client="acme web 2")
    make_call_record(client="globex")
    page = detail(auditor, record)
    url = reverse(LEDGER) + "?client__exact=acme+web"
    assert f'href="{url}"' in page
    assert listed(auditor, client__exact="acme web") == {record.pk, same.pk}


def test_staff_without_the_view_permission_are_refused(client):
    record = make_call_record()
    client.force_login(make_user(staff=True))
    assert client.get(reverse(LEDGER)).status_code == 403
    change = reverse("admin:billing_callrecord_change", args=[record.pk])
    assert client.get(change).status_code == 403
