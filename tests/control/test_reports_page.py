"""The control room's reports page and its CSV downloads, as a staff user through the Django
test client."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from providers.models import Incident
from tests.control.conftest import log_in, make_operator, screenshot
from tests.control.test_browser_csp import violations  # noqa: F401 - the fixture, used below
from tests.factories import make_call_record, make_provider, make_user

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def viewer(client):
    client.force_login(make_user(perms=("billing.view_callrecord",)))
    return client


@pytest.fixture
def ledger():
    """Today's requests: three local answers, one cloud answer, a static answer and a degraded
    one, all during an incident of the local provider."""
    make_provider(name="ollama-local", is_local=True)
    make_provider(name="openai-cloud", is_local=False)
    now = timezone.now()
    # All of it today, even just after midnight.
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    at = max(now - timedelta(minutes=10), midnight)
    Incident.objects.create(provider="ollama-local", started_at=at)
    for _ in range(3):
        make_call_record(final_provider="ollama-local", created_at=at)
    make_call_record(
        final_provider="openai-cloud",
        tier="secondary",
        cost=Decimal("0.40"),
        tokens_in=100,
        tokens_out=50,
        created_at=at,
    )
    for tier in ("static", "degraded"):
        make_call_record(final_provider="", tier=tier, outcome="fallback", created_at=at)
    return now


def page(client, **params):
    response = client.get(reverse("admin:control-reports"), params)
    assert response.status_code == 200
    return response, {section.slug: section for section in response.context["sections"]}


def test_it_is_in_the_control_room_nav(viewer):
    assert reverse("admin:control-reports") in viewer.get(reverse("admin:index")).content.decode()


def test_it_shows_the_four_reports_with_their_targets(viewer, ledger):
    response, sections = page(viewer)
    assert list(sections) == ["spend", "cloud-share", "coverage", "incidents"]
    html = response.content.decode()
    assert "Cloud share 25.00 % of 4 answered requests (target at most 5 %): above target." in html
    assert "Static coverage 50.00 % of 2 requests" in html
    assert "(target at least 60 %): below target." in html
    assert "1 incident," in html
    assert "0.4000 EUR in all." in html
    # The definitions are on the page, not only in the docstrings.
    assert "share given a matching static answer rather than the degradation message" in html
    for section in sections.values():
        for svg in section.charts:
            ET.fromstring(str(svg))  # well-formed
    share_chart = ET.fromstring(str(sections["cloud-share"].charts[0]))
    lines = [p.get("data-series") for p in share_chart.iter(f"{SVG}path")]
    assert lines == ["cloud share of requests (%)", "target 5 %"]
    incident = sections["incidents"].report.rows[0]
    assert (incident["requests_secondary"], incident["requests_static"]) == (1, 1)
    assert incident["cloud_cost"] == Decimal("0.4")


def test_the_range_and_grouping_come_from_the_form(viewer, ledger):
    today = timezone.localtime(ledger).date()
    _, sections = page(viewer, since=str(today), until=str(today), by="month", group="client")
    spend = sections["spend"].report
    assert (spend.query.since, spend.query.until, spend.query.by) == (today, today, "month")
    assert spend.columns[1] == "client"
    assert [row["period"] for row in spend.rows] == [f"{today:%Y-%m}"]
    assert sections["incidents"].report.query.by == "day"


def test_a_bad_date_is_said_and_the_default_range_shown(viewer):
    response, sections = page(viewer, since="not-a-date")
    assert "since: &#x27;not-a-date&#x27; is not a date as YYYY-MM-DD." in response.content.decode()
    assert (sections["spend"].report.query.until - sections["spend"].report.query.since).days == 29


def test_download_csv_serves_what_the_command_prints(viewer, ledger):
    _, sections = page(viewer)
    for slug, section in sections.items():
        response = viewer.get(section.csv_url)
        assert response.status_code == 200
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert response["Content-Disposition"].startswith(f'attachment; filename="{slug}-')
        query = section.report.query
        out = io.StringIO()
        args = ["--since", str(query.since), "--until", str(query.until), "--format", "csv"]
        if slug == "spend":
            args += ["--group", query.group]
        call_command("report", slug, *args, stdout=out)
        body = response.content.decode()
        if slug == "incidents":  # an ongoing incident's length grows between the two reads
            body, printed = (_without_length(text) for text in (body, out.getvalue()))
        else:
            printed = out.getvalue()
        assert body == printed
    spend = list(
        csv.DictReader(io.StringIO(viewer.get(sections["spend"].csv_url).content.decode()))
    )
    assert {row["provider"]: row["cost"] for row in spend}["openai-cloud"] == "0.40000000"


def _without_length(text):
    rows = list(csv.DictReader(io.StringIO(text)))
    return [{key: value for key, value in row.items() if key != "length_s"} for row in rows]


def test_a_bad_csv_request_is_a_400_saying_why(viewer):
    url = reverse("admin:control-reports-csv", args=["coverage"])
    response = viewer.get(url, {"until": "2026-02-30"})
    assert response.status_code == 400
    assert response.content.decode() == "until: '2026-02-30' is not a date as YYYY-MM-DD."
    assert viewer.get(reverse("admin:control-reports-csv", args=["budgets"])).status_code == 400
    # The year 9999's last days: a range's end (the next midnight) can't be reckoned.
    response = viewer.get(url, {"since": "9999-12-01", "until": "9999-12-31"})
    assert response.status_code == 400
    assert "is outside 2000-01-01 to 9998-12-31." in response.content.decode()
    assert page(viewer, until="9999-12-31")[0].status_code == 200


def test_staff_without_the_ledger_permission_are_refused(client):
    client.force_login(make_user(staff=True))
    assert client.get(reverse("admin:control-reports")).status_code == 403
    csv_url = reverse("admin:control-reports-csv", args=["spend"])
    assert client.get(csv_url).status_code == 403


def test_anonymous_users_are_sent_to_log_in(client):
    for url in (
        reverse("admin:control-reports"),
        reverse("admin:control-reports-csv", args=["spend"]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_a_browser_the_page_keeps_to_the_policy_and_downloads_its_csv(
    page,
    platform_url,
    violations,  # noqa: F811 - the fixture imported above
):
    make_provider(name="openai-cloud-report", is_local=False)
    make_call_record(final_provider="openai-cloud-report", tier="secondary", cost=Decimal("0.5"))
    make_operator("reports-viewer")
    log_in(page, platform_url, "reports-viewer")
    response = page.goto(f"{platform_url}{reverse('admin:control-reports')}")
    assert response is not None and response.ok
    page.wait_for_timeout(300)  # the browser reports violations as queued tasks
    assert violations == []
    assert page.locator("figure.chart-figure svg").count() == 5
    assert (
        page.locator("#report-cloud-share .report-headline")
        .inner_text()
        .endswith("(target at most 5 %): above target.")
    )
    with page.expect_download() as download:
        page.click("#report-spend a.report-csv")
    with open(download.value.path(), encoding="utf-8") as body:
        rows = list(csv.DictReader(body))
    assert {row["provider"]: row["cost"] for row in rows}["openai-cloud-report"] == "0.50000000"
    screenshot(page, "reports")
