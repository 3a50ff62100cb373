"""The charts page: SVG drawn from plain numbers (charts.py) and the ledger queries behind it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import dateformat, timezone

from control_room import charts
from control_room.charts_views import hour_row_label, hour_slots
from tests.factories import make_call_record, make_user

SVG = "{http://www.w3.org/2000/svg}"


def parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def bars(svg: ET.Element) -> list[ET.Element]:
    return [el for el in svg.iter(f"{SVG}rect") if el.get("class") == "chart-bar"]


def texts(svg: ET.Element, css_class: str) -> list[str]:
    return ["".join(el.itertext()) for el in svg.iter(f"{SVG}text") if el.get("class") == css_class]


class TestDrawing:
    def test_a_bar_chart_is_an_accessible_svg_image(self):
        svg = parse(
            charts.bar_chart(title="Spend per day", labels=["1 Mar", "2 Mar"], values=[1, 2])
        )
        assert svg.tag == f"{SVG}svg"
        assert svg.get("role") == "img"
        assert svg.get("aria-label", "").startswith("Spend per day.")
        assert svg.find(f"{SVG}title").text == "Spend per day"
        assert svg.find(f"{SVG}desc").text

    def test_bar_heights_are_proportional_to_the_values(self):
        svg = parse(
            charts.bar_chart(title="t", labels=["a", "b", "c", "d"], values=[10, 5, 0, 2.5])
        )
        heights = [float(bar.get("height")) for bar in bars(svg)]
        assert len(heights) == 3  # a zero draws no bar
        assert heights[0] == pytest.approx(2 * heights[1], abs=0.02)
        assert heights[0] == pytest.approx(4 * heights[2], abs=0.02)
        # The tallest bar fits the plot: the axis tops out at a round number at or above it.
        assert heights[0] <= charts.PLOT_H

    def test_stacked_segments_sit_on_each_other_in_proportion(self):
        svg = parse(
            charts.stacked_bar_chart(
                title="t",
                labels=["09:00", "10:00"],
                series={"primary": [6, 0], "secondary": [3, 2]},
                colors={"primary": "#2e7d32"},
            )
        )
        segments = bars(svg)
        assert [s.get("data-series") for s in segments] == ["primary", "secondary", "secondary"]
        primary, secondary, later = segments
        assert float(primary.get("height")) == pytest.approx(
            2 * float(secondary.get("height")), abs=0.02
        )
        # The second segment starts where the first one ends.
        assert float(secondary.get("y")) + float(secondary.get("height")) == pytest.approx(
            float(primary.get("y")), abs=0.02
        )
        assert primary.get("fill") == "#2e7d32"
        assert later.find(f"{SVG}title").text == "10:00 · secondary: 2"

    def test_it_draws_a_legend_entry_per_series(self):
        svg = parse(
            charts.stacked_bar_chart(
                title="t", labels=["a"], series={"primary": [1], "cache": [0], "none": [0]}
            )
        )
        legend = [
            "".join(g.itertext())
            for g in svg.iter(f"{SVG}g")
            if g.get("class") == "chart-legend-item"
        ]
        assert legend == ["primary", "cache", "none"]

    def test_labels_and_names_are_escaped(self):
        hostile = '<script>alert("x")</script>'
        markup = charts.line_chart(
            title="A & B <title>", labels=[hostile, "b"], series={hostile: [1.0, 2.0]}
        )
        assert "<script>" not in markup
        svg = parse(markup)  # still well-formed XML
        assert svg.find(f"{SVG}title").text == "A & B <title>"
        assert hostile in texts(svg, "chart-label")
        assert hostile in "".join(svg.find(f"{SVG}g").itertext())

    def test_empty_data_draws_the_chart_with_a_note(self):
        for markup in (
            charts.bar_chart(title="t", labels=["a", "b"], values=[0, 0]),
            charts.bar_chart(title="t", labels=[], values=[]),
            charts.stacked_bar_chart(title="t", labels=["a"], series={"primary": [0]}),
            charts.line_chart(title="t", labels=["a", "b"], series={}),
            charts.line_chart(title="t", labels=["a"], series={"p": [None]}),
        ):
            svg = parse(markup)
            assert texts(svg, "chart-empty") == [charts.NO_REQUESTS]
            assert bars(svg) == []
            assert charts.NO_REQUESTS in svg.get("aria-label")

    def test_a_line_breaks_where_a_slot_has_no_value(self):
        svg = parse(
            charts.line_chart(
                title="p95", labels=["a", "b", "c", "d"], series={"p": [100, 200, None, 300]}
            )
        )
        path = next(svg.iter(f"{SVG}path"))
        assert path.get("d").count("M") == 2 and path.get("d").count("L") == 1
        assert len(list(svg.iter(f"{SVG}circle"))) == 3

    def test_the_bar_chart_prints_its_total(self):
        svg = parse(
            charts.bar_chart(title="t", labels=["a", "b"], values=[1, 2], total_label="total 3.00")
        )
        assert texts(svg, "chart-total") == ["total 3.00"]

    def test_only_every_nth_label_is_printed_on_the_axis(self):
        labels = [f"{h:02d}:00" for h in range(24)]
        svg = parse(charts.bar_chart(title="t", labels=labels, values=[1] * 24, label_every=3))
        assert texts(svg, "chart-label") == labels[::3]


class TestNumbers:
    def test_p95_is_the_nearest_rank(self):
        assert charts.percentile(range(100, 2001, 100), 95) == 1900
        assert charts.percentile([300, 320, 5000], 95) == 5000
        assert charts.percentile([42], 95) == 42
        assert charts.percentile([], 95) is None

    @pytest.mark.parametrize(
        ("largest", "top"), [(3, 3), (7, 8), (97, 100), (0.0013, 0.0015), (1234, 1500)]
    )
    def test_the_axis_is_round_and_holds_the_largest_value(self, largest, top):
        scale = charts.nice_scale(largest, integer=isinstance(largest, int))
        assert scale.top == pytest.approx(top)
        assert scale.top >= largest and scale.ticks()[0] == 0

    def test_an_empty_axis_still_has_a_height(self):
        assert charts.nice_scale(0).top > 0


@pytest.fixture
def viewer(client, db):
    client.force_login(make_user(perms=("billing.view_callrecord",)))
    return client


def charts_page(client):
    response = client.get(reverse("admin:control-charts"))
    assert response.status_code == 200
    return response, {chart.slug: chart for chart in response.context["charts"]}


def row_for(chart, moment):
    """The data-table row of the hour `moment` falls in, keyed as the view labels it."""
    hour = timezone.localtime(moment).replace(minute=0, second=0, microsecond=0)
    (row,) = [row for row in chart.rows if row[0] == hour_row_label(hour)]
    return dict(zip(chart.columns, row, strict=True))


@pytest.mark.django_db
class TestChartsPage:
    def test_it_is_in_the_control_room_nav(self, viewer):
        page = viewer.get(reverse("admin:index")).content.decode()
        assert reverse("admin:control-charts") in page

    def test_staff_without_the_ledger_permission_are_refused(self, client):
        client.force_login(make_user(staff=True))
        assert client.get(reverse("admin:control-charts")).status_code == 403

    def test_anonymous_users_are_sent_to_log_in(self, client):
        response = client.get(reverse("admin:control-charts"))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))

    def test_an_empty_ledger_draws_three_empty_charts(self, viewer):
        response, by_slug = charts_page(viewer)
        page = response.content.decode()
        assert page.count(f">{charts.NO_REQUESTS}</text>") == 3
        assert set(by_slug) == {"tiers", "latency", "spend"}
        for chart in by_slug.values():
            parse(str(chart.svg))
        assert by_slug["spend"].footer == ["Total", 0, "0.000000"]

    def test_requests_are_counted_per_tier_per_hour(self, viewer):
        now = timezone.now()
        earlier = now - timedelta(hours=3)
        for _ in range(3):
            make_call_record(tier="primary", created_at=now)
        make_call_record(tier="secondary", final_provider="openai-cloud", created_at=now)
        for _ in range(2):
            make_call_record(
                tier="static", outcome="fallback", final_provider="", created_at=earlier
            )
        make_call_record(tier="primary", created_at=now - timedelta(days=2))  # not today's chart

        response, by_slug = charts_page(viewer)
        tiers = by_slug["tiers"]
        assert len(tiers.rows) == 24
        this_hour = row_for(tiers, now)
        assert (this_hour["primary"], this_hour["secondary"], this_hour["total"]) == (3, 1, 4)
        that_hour = row_for(tiers, earlier)
        assert (that_hour["static"], that_hour["primary"], that_hour["total"]) == (2, 0, 2)
        assert tiers.footer[-1] == 6
        svg = parse(str(tiers.svg))
        assert {bar.get("data-series") for bar in bars(svg)} == {"primary", "secondary", "static"}
        assert "<td>4</td>" in response.content.decode()

    def test_hours_are_the_local_time_zones_hours(self, viewer, settings):
        # Half an hour off UTC: a local hour spans two UTC hours, so grouping in UTC would split it.
        settings.TIME_ZONE = "Asia/Kolkata"
        hour = timezone.localtime(timezone.now()).replace(minute=0, second=0, microsecond=0)
        hour -= timedelta(hours=3)
        make_call_record(created_at=hour + timedelta(minutes=15))
        make_call_record(created_at=hour + timedelta(minutes=45))
        response, by_slug = charts_page(viewer)
        assert row_for(by_slug["tiers"], hour)["total"] == 2
        assert "Asia/Kolkata" in response.content.decode()

    def test_p95_latency_is_per_provider_per_hour_over_answered_requests(self, viewer):
        now = timezone.now()
        for latency in range(100, 2001, 100):  # 20 calls: the 19th is the p95
            make_call_record(final_provider="ollama-local", latency_ms=latency, created_at=now)
        for latency in (300, 320, 5000):
            make_call_record(
                final_provider="openai-cloud", tier="secondary", latency_ms=latency, created_at=now
            )
        # Not answered by the provider: left out, however slow.
        make_call_record(
            final_provider="ollama-local", outcome="failed", latency_ms=99999, created_at=now
        )
        make_call_record(
            final_provider="", tier="static", outcome="fallback", latency_ms=88888, created_at=now
        )

        response, by_slug = charts_page(viewer)
        latency = by_slug["latency"]
        row = row_for(latency, now)
        assert row["ollama-local p95 (ms)"] == "1900"
        assert row["openai-cloud p95 (ms)"] == "5000"
        earlier = row_for(latency, now - timedelta(hours=5))
        assert set(earlier.values()) - {earlier["Hour"]} == {"—"}
        page = response.content.decode()
        assert "<td>1900</td>" in page and "<td>5000</td>" in page
        assert "99999" not in page and "88888" not in page
        paths = [p.get("data-series") for p in parse(str(latency.svg)).iter(f"{SVG}path")]
        assert paths == ["ollama-local", "openai-cloud"]

    def test_spend_is_summed_per_day_with_the_total(self, viewer):
        now = timezone.now()
        make_call_record(cost=Decimal("0.50"), created_at=now)
        make_call_record(cost=Decimal("0.25"), created_at=now)
        three_days_ago = now - timedelta(days=3)
        make_call_record(cost=Decimal("1.5"), created_at=three_days_ago)
        make_call_record(cost=Decimal("100"), created_at=now - timedelta(days=40))  # too old

        response, by_slug = charts_page(viewer)
        spend = by_slug["spend"]
        assert len(spend.rows) == 30
        by_day = {row[0]: row[1:] for row in spend.rows}
        today = dateformat.format(timezone.localtime(now).date(), "D j M Y")
        before = dateformat.format(timezone.localtime(three_days_ago).date(), "D j M Y")
        assert by_day[today] == [2, "0.7500"]
        assert by_day[before] == [1, "1.50"]
        assert spend.footer == ["Total", 3, "2.25"]
        assert texts(parse(str(spend.svg)), "chart-total") == ["total 2.25"]
        assert len(bars(parse(str(spend.svg)))) == 2
        assert "2.25" in response.content.decode()

    def test_free_requests_say_no_spend_rather_than_no_requests(self, viewer):
        make_call_record(cost=Decimal("0"))
        _, by_slug = charts_page(viewer)
        assert texts(parse(str(by_slug["spend"].svg)), "chart-empty") == [
            "No spend in this period."
        ]

    def test_a_provider_name_is_escaped_on_the_page(self, viewer):
        make_call_record(final_provider="<img src=x onerror=alert(1)>", latency_ms=10)
        response, _ = charts_page(viewer)
        page = response.content.decode()
        assert "<img src=x" not in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_hour_slots_are_24_consecutive_hours_ending_with_the_current_one():
    now = timezone.now()
    slots = hour_slots(now, timezone.get_current_timezone(), 24)
    assert len(slots) == 24
    assert slots[-1] <= now < slots[-1] + timedelta(hours=1)
    assert all(b - a == timedelta(hours=1) for a, b in zip(slots, slots[1:], strict=False))
