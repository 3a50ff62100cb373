"""The drill's arithmetic over collected samples, its text, and its schedule: pure functions, no
I/O."""

from __future__ import annotations

import pytest

from devtools.drill import report, report_text
from devtools.drill.load import Reading, Sample
from devtools.drill.scenarios import (
    FAILOVER_TARGETS,
    SCENARIOS,
    Action,
    Expect,
    Window,
    fault_window,
    timeline,
)

pytestmark = pytest.mark.backend_free


def ok(sent_at: float, latency: float = 0.05, tier: str = "primary", rid: str = "") -> Sample:
    return Sample(sent_at, latency, 200, tier=tier, request_id=rid or f"r{sent_at}")


def inputs(samples, **overrides) -> report.Inputs:
    values = {
        "samples": samples,
        "readings": [],
        "faulted_provider": "ollama-local",
        "faulted_tier": "primary",
        "next_tiers": ("secondary",),
        "fault_at": 2.0,
        "clear_at": 6.0,
        "ledger": report.Ledger(matched=len(samples), client_rows=len(samples), waited_s=0.1),
        "expect": Expect(breaker_opens=None),
    }
    return report.Inputs(**{**values, **overrides})


class TestNextTier:
    def test_it_is_read_from_when_answers_came_back_not_when_requests_were_sent(self):
        # Sent at 2.1 and 2.2, both wait out a 15 s timeout: traffic moved on after ~15 s.
        samples = [ok(1.0), ok(2.1, 15.0, "secondary"), ok(2.2, 15.0, "secondary")]
        samples += [ok(17.0 + i / 10, 0.05, "secondary") for i in range(10)]
        found = report.fault_to_next_tier(inputs(samples, clear_at=30.0))
        assert found == pytest.approx(15.05, abs=0.01)  # the first answer at all after the fault

    def test_it_is_the_first_answer_after_which_99_percent_are_on_the_next_tier(self):
        samples = [ok(2.0 + i / 10, 0.01, "primary") for i in range(5)]
        samples += [ok(2.5 + i / 10, 0.01, "secondary") for i in range(30)]
        assert report.fault_to_next_tier(inputs(samples)) == pytest.approx(0.51, abs=0.01)

    def test_a_lone_late_answer_on_the_next_tier_is_not_traffic_moved(self):
        samples = [ok(2.0 + i / 10, 0.01, "primary") for i in range(30)] + [
            ok(5.9, 0.01, "secondary")
        ]
        assert report.fault_to_next_tier(inputs(samples)) is None

    def test_answers_to_requests_in_flight_at_the_fault_then_silence_are_not_traffic_moved(self):
        # A primary answer just after the fault, then 100 secondary answers after a 15 s wait:
        # 100 of 101 is 99 %, but traffic moved when the secondary first answered.
        samples = [ok(1.95, 0.07)]
        samples += [ok(2.0 + i / 100, 15.0, "secondary") for i in range(100)]
        found = report.fault_to_next_tier(inputs(samples, clear_at=None))
        assert found == pytest.approx(15.0, abs=0.01)

    def test_client_errors_do_not_count_as_served_by_the_next_tier(self):
        samples = [Sample(2.0 + i / 10, 0.01, 502, tier="secondary") for i in range(20)]
        assert report.fault_to_next_tier(inputs(samples)) is None

    def test_a_flapping_fault_is_read_within_its_first_down(self):
        # Down 2-6 s (on the secondary at once), up 6-8 s (the primary again), down 8-10 s.
        samples = [ok(2.0 + i / 10, 0.01, "secondary") for i in range(40)]
        samples += [ok(6.0 + i / 10, 0.01, "primary") for i in range(20)]
        samples += [ok(8.0 + i / 10, 0.01, "secondary") for i in range(20)]
        found = report.fault_to_next_tier(inputs(samples, clear_at=10.0, first_clear_at=6.0))
        assert found == pytest.approx(0.01, abs=0.005)
        assert report.fault_to_next_tier(inputs(samples, clear_at=10.0)) > 6

    def test_fallback_tiers_count_when_they_are_the_next_tier(self):
        samples = [ok(3.0 + i / 10, 0.01, tier) for i, tier in enumerate(["cache", "static"] * 5)]
        found = report.fault_to_next_tier(inputs(samples, next_tiers=("cache", "static")))
        assert found == pytest.approx(1.01, abs=0.01)

    def test_there_is_none_when_no_tier_is_meant_to_change(self):
        assert report.fault_to_next_tier(inputs([ok(3.0)], next_tiers=None)) is None


class TestBreakerAndRecovery:
    def test_fault_to_open_is_the_first_reading_after_the_fault_that_says_open(self):
        readings = [
            Reading(1.0, {"ollama-local": "open"}),  # before the fault: not this fault's
            Reading(2.5, {"ollama-local": "closed"}),
            Reading(3.25, {"ollama-local": "open"}),
            Reading(7.5, {"ollama-local": "half_open"}),
            Reading(8.0, {"ollama-local": "closed"}),
        ]
        built = report.build(inputs([ok(1.0)], readings=readings))
        assert (built.fault_to_open_s, built.breaker_opened) == (1.25, True)
        assert built.breaker_closed_after_clear_s == 2.0

    def test_recovery_is_the_first_primary_answer_to_a_request_sent_after_the_clear(self):
        samples = [ok(5.0, 2.0, "primary"), ok(6.5, 0.1, "secondary"), ok(7.0, 0.5, "primary")]
        assert report.recovery(inputs(samples)) == 1.5

    def test_no_recovery_within_the_run_is_none(self):
        assert report.recovery(inputs([ok(6.5, 0.1, "secondary")])) is None
        assert report.recovery(inputs([ok(6.5)], clear_at=None)) is None


def made(started_at: float, outcome: str = "error", provider: str = "ollama-local"):
    return report.LedgerCall(started_at, started_at + 0.5, provider, outcome, "timeout")


def skip(started_at: float, provider: str = "ollama-local") -> report.LedgerCall:
    return report.LedgerCall(started_at, started_at + 0.01, provider, "skipped", "breaker_open")


class TestAdmittedAfterOpen:
    # The fault at 2 s; the status (one process) says open at 3.0 s; cooldown 5 s.
    readings = [Reading(2.5, {"ollama-local": "closed"}), Reading(3.0, {"ollama-local": "open"})]

    def late(self, calls, **overrides):
        values = {"readings": self.readings, "calls": calls, "cooldown_s": 5.0}
        return report.late_admissions(inputs([ok(1.0)], **{**values, **overrides}))

    def test_calls_made_more_than_a_second_after_the_opening_are_counted_with_the_latest(self):
        calls = [made(2.9), made(3.9), made(4.1), made(5.5, "cancelled"), made(4.2, "ok")]
        late = self.late(calls)
        assert (late["opened_at"], late["opened_seen_in"]) == (3.0, "status")
        assert (late["calls"], late["latest_after_open_s"]) == (3, 2.5)
        assert (late["from"], late["until"]) == (4.0, 7.75)
        assert late["within_1s"] == 1  # 3.9 s, 0.9 s after the opening (2.9 s: before it)

    def test_skips_other_providers_and_probes_after_the_cooldown_are_not_counted(self):
        calls = [skip(4.5), made(4.5, "ok", "openai-cloud"), made(7.8), made(9.0, "ok")]
        assert (self.late(calls)["calls"], self.late(calls)["latest_after_open_s"]) == (0, None)

    def test_a_skip_in_any_process_before_the_status_says_open_is_the_opening(self):
        # Another process skipped it at 2.4 s: a call made at 3.6 s came 1.2 s after.
        late = self.late([skip(1.5), skip(2.4), made(3.6)])
        assert (late["opened_at"], late["opened_seen_in"]) == (2.4, "ledger")
        assert (late["calls"], late["latest_after_open_s"]) == (1, 1.2)

    def test_a_skip_alone_says_the_breaker_opened_when_the_status_was_not_read(self):
        assert self.late([skip(3.2), made(4.5)], readings=[])["opened_at"] == 3.2

    def test_it_is_not_measured_without_an_opening_or_a_cooldown(self):
        assert self.late([made(4.5)], readings=[]) is None
        assert self.late([made(4.5)], cooldown_s=None) is None
        assert self.late([made(4.5)], faulted_provider=None) is None

    def test_a_late_call_fails_a_scenario_whose_breaker_must_open_and_no_other(self):
        values = {"readings": self.readings, "calls": [made(4.5)], "cooldown_s": 5.0}
        failed = report.build(inputs([ok(1.0)], **values, expect=Expect()))
        assert len(failed.violations) == 1
        assert failed.violations[0].startswith(
            "calls to ollama-local admitted > 1 s after its breaker opened: 1 (the latest 1.50 s"
        )
        for expect in (Expect(breaker_opens=None), Expect(breaker_opens=False)):
            built = report.build(inputs([ok(1.0)], **values, expect=expect))
            assert not any("admitted" in v for v in built.violations)
        clean = report.build(inputs([ok(1.0)], **{**values, "calls": []}, expect=Expect()))
        assert clean.violations == []

    def test_the_text_and_the_json_say_it(self):
        built = report.build(inputs([ok(1.0)], readings=self.readings, calls=[made(4.5)],
                                    cooldown_s=5.0))  # fmt: skip
        text = report_text.text(built, scenario="blackhole", description="d")
        assert "calls to ollama-local admitted > 1 s after its breaker opened: 1 " in text
        assert "(the latest 1.50 s after)" in text
        assert built.to_dict()["late_admissions"]["calls"] == 1
        unmeasured = report.build(inputs([ok(1.0)]))
        assert unmeasured.late_admissions is None
        assert "the breaker never opened" in report_text.text(
            unmeasured, scenario="s", description=""
        )


class TestTotals:
    def test_client_errors_waits_and_the_slowest(self):
        samples = [
            ok(0.1),
            ok(0.2, 2.5, "secondary"),
            Sample(0.3, 0.01, 401),
            Sample(0.4, 45.0, None, error="ReadTimeout: timed out"),
            Sample(
                1.2, 0.3, 200, tier="primary", error="stream broken mid-answer", broken_stream=True
            ),
        ]
        built = report.build(inputs(samples))
        assert (built.requests, built.client_errors, built.broken_streams) == (5, 3, 1)
        assert built.errors_by_kind == {
            "HTTP 401": 1,
            "ReadTimeout": 1,
            "stream broken mid-answer": 1,
        }
        assert built.tiers == {"primary": 1, "secondary": 1}
        assert built.waits_over_2s == 2
        assert built.answered_within_2s_pct == 20.0
        assert built.slowest["latency_s"] == 45.0 and built.slowest["status"] is None

    def test_per_second_counts_each_tier_and_the_errors_by_when_requests_were_sent(self):
        samples = [ok(0.1), ok(0.9, 5.0, "secondary"), Sample(2.5, 0.1, 500)]
        assert report.per_second(samples) == [{"primary": 1, "secondary": 1}, {}, {"error": 1}]

    def test_percentile_is_nearest_rank(self):
        assert report.percentile([], 95) == 0.0
        assert report.percentile([float(i) for i in range(1, 101)], 95) == 95.0
        assert report.percentile([3.0, 1.0, 2.0], 50) == 2.0

    def test_the_chart_marks_the_fault_and_scales_to_the_busiest_second(self):
        samples = [ok(0.1 + i / 20) for i in range(10)] + [ok(2.1, tier="secondary")]
        lines = report_text.chart(report.build(inputs(samples)))
        assert lines[0].count("P") == report_text.CHART_WIDTH
        assert "S" * 4 in lines[2] and lines[2].endswith("<- fault")


class TestExpectations:
    def test_a_clean_run_has_no_violations(self):
        assert report.build(inputs([ok(0.1), ok(0.2)])).violations == []

    def test_client_errors_ledger_mismatch_and_a_missing_open_are_violations(self):
        samples = [ok(0.1), Sample(0.2, 0.1, 503)]
        ledger = report.Ledger(matched=1, client_rows=2, waited_s=15.0)
        built = report.build(inputs(samples, ledger=ledger, expect=Expect()))
        assert built.ledger_ok is False
        assert len(built.violations) == 3
        assert "1 client errors" in built.violations[0]
        assert "never opened" in built.violations[1]
        assert "ledger rows" in built.violations[2]

    def test_the_ledger_must_hold_every_request_even_one_without_an_id(self):
        samples = [ok(0.1), Sample(0.2, 45.0, None, error="ConnectError: refused")]
        ledger = report.Ledger(matched=1, client_rows=1, waited_s=15.0, ids_missing=1)
        assert report.build(inputs(samples, ledger=ledger)).ledger_ok is False

    def test_a_false_trip_is_a_violation_when_the_breaker_must_stay_closed(self):
        readings = [Reading(3.0, {"ollama-local": "open"})]
        built = report.build(
            inputs([ok(0.1)], readings=readings, expect=Expect(breaker_opens=False))
        )
        assert built.violations == ["the breaker of ollama-local opened (a false trip)"]

    def test_broken_streams_are_allowed_only_where_the_scenario_says(self):
        broken = Sample(0.2, 0.1, 200, tier="primary", error="stream broken", broken_stream=True)
        allowed = Expect(breaker_opens=None, broken_streams_allowed=True)
        assert report.build(inputs([ok(0.1), broken], expect=allowed)).violations == []
        assert report.build(inputs([ok(0.1), broken])).violations != []

    def test_requests_the_load_could_not_send_are_a_violation(self):
        assert report.build(inputs([ok(0.1)], skipped=3)).violations == [
            "3 requests not sent: the bound on requests in flight"
        ]

    def test_the_text_says_passed_or_what_failed(self):
        built = report.build(inputs([ok(0.1), Sample(0.2, 0.1, 500)]))
        text = report_text.text(built, scenario="refused", description="d")
        assert text.splitlines()[-1] == "FAILED: 1 client errors (at most 0 expected)"
        assert "2 rows matched of 2 sent" in text


def the_night(*, stuck_wait_s: float, timeout_s: float = 15.0, open_at: float) -> report.Inputs:
    """Issue #13's night: 50 requests a second for 20 s, the primary black-holed at 4.9 s; the
    requests from then on wait `stuck_wait_s` on it, then the secondary answers."""
    samples = [
        ok(i / 50) if i / 50 < 4.9 else ok(i / 50, stuck_wait_s, "secondary") for i in range(1000)
    ]
    return inputs(
        samples,
        fault_at=4.9,
        clear_at=None,
        readings=[
            Reading(4.75, {"ollama-local": "closed"}),
            Reading(open_at, {"ollama-local": "open"}),
        ],
        expect=SCENARIOS["blackhole"].expect,
        faulted_timeout_s=timeout_s,
    )


class TestTheIssuesTargets:
    def test_the_failing_night_fails_every_target_though_no_client_saw_an_error(self):
        # 754 of 1,000 requests waited the primary's full 15 s; traffic moved after 15 s.
        built = report.build(the_night(stuck_wait_s=15.05, open_at=19.5))
        assert (built.requests, built.client_errors, built.full_timeout_waits) == (1000, 0, 755)
        assert built.violations == [
            "24.5 % answered within 2 s (at least 95 % expected)",
            "traffic moved to the next tier after 15.05 s (within 2 s of the fault expected)",
            "755 requests waited the full 15 s timeout of ollama-local (none expected)",
        ]
        text = report_text.text(built, scenario="blackhole", description="d")
        assert text.splitlines()[-1].startswith("FAILED: 24.5 % answered within 2 s")
        assert "waited a full timeout    755" in text

    def test_a_night_moved_on_within_a_second_passes(self):
        # The stuck calls are found and moved on 1.1 s after they were sent.
        built = report.build(the_night(stuck_wait_s=1.1, open_at=5.75))
        assert built.answered_within_2s_pct == 100.0
        assert built.fault_to_next_tier_s is not None and built.fault_to_next_tier_s < 2
        assert built.full_timeout_waits == 0
        assert built.violations == []
        assert report_text.text(built, scenario="blackhole", description="d").endswith("PASSED")

    def test_traffic_that_never_moves_fails_the_next_tier_target(self):
        samples = [ok(i / 10) for i in range(100)]  # the primary keeps answering
        built = report.build(
            inputs(samples, expect=Expect(breaker_opens=None, next_tier_within_s=2.0))
        )
        assert built.violations == [
            "traffic moved to the next tier never (within 2 s of the fault expected)"
        ]

    def test_a_wait_the_timeout_cannot_be_checked_against_fails_closed(self):
        built = report.build(the_night(stuck_wait_s=1.1, open_at=5.75, timeout_s=None))
        assert built.full_timeout_waits is None
        assert built.violations == [
            "the timeout of ollama-local is not known: no request may wait it out, and that "
            "could not be checked"
        ]

    def test_requests_sent_before_the_fault_do_not_count_as_waiting_it_out(self):
        samples = [ok(1.0, 16.0, "primary"), ok(3.0, 15.0, "secondary"), ok(4.0, 0.5, "secondary")]
        assert report.full_timeout_waits(inputs(samples, faulted_timeout_s=15.0)) == 1
        assert report.full_timeout_waits(inputs(samples)) is None

    def test_blackhole_and_refused_hold_the_targets_and_slow_the_move_to_the_next_tier(self):
        assert SCENARIOS["blackhole"].expect == SCENARIOS["refused"].expect == FAILOVER_TARGETS
        assert FAILOVER_TARGETS.min_within_2s_pct == 95.0
        assert FAILOVER_TARGETS.next_tier_within_s == 2.0 and FAILOVER_TARGETS.no_full_timeout
        assert SCENARIOS["slow"].expect.next_tier_within_s == 2.0
        assert SCENARIOS["slow_normal"].expect.min_within_2s_pct is None


class TestTimeline:
    def test_a_fault_starts_at_fault_at_and_is_reset_when_it_clears(self):
        actions = timeline(SCENARIOS["blackhole"], fault_at=5, fault_for=10, duration=30)
        assert actions == [
            Action(5, "primary", "fault", {"mode": "hang"}),
            Action(15, "primary", "clear"),
        ]
        assert fault_window(actions, 30) == Window(5, 15, 15)

    def test_refused_closes_the_listener_for_the_faults_length(self):
        actions = timeline(SCENARIOS["refused"], fault_at=2, fault_for=4, duration=10)
        assert actions == [Action(2, "primary", "refuse", seconds=4)]
        assert fault_window(actions, 10) == Window(2, 6, 6)

    def test_flapping_is_ten_seconds_down_ten_up_within_the_fault(self):
        actions = timeline(SCENARIOS["flapping"], fault_at=5, fault_for=40, duration=60)
        faults = [a.at for a in actions if a.op == "fault"]
        clears = [a.at for a in actions if a.op == "clear"]
        assert (faults, clears) == ([5, 25], [15, 35])
        assert fault_window(actions, 60) == Window(5, 15, 35)

    def test_a_fault_to_the_end_of_the_run_never_clears(self):
        actions = timeline(SCENARIOS["slow_normal"], fault_at=0, fault_for=None, duration=60)
        assert [a.op for a in actions] == ["fault"]
        assert fault_window(actions, 60) == Window(0, None, None)

    def test_redis_down_stops_and_starts_redis(self):
        actions = timeline(SCENARIOS["redis_down"], fault_at=5, fault_for=10, duration=30)
        assert [(a.at, a.target, a.op) for a in actions] == [
            (5, "redis", "stop"),
            (15, "redis", "start"),
        ]

    def test_secondary_unauthorized_breaks_both_and_expects_the_fallback_tiers(self):
        scenario = SCENARIOS["secondary_unauthorized"]
        actions = timeline(scenario, fault_at=5, fault_for=10, duration=30)
        assert {(a.target, a.op) for a in actions} == {
            ("secondary", "fault"),
            ("secondary", "clear"),
            ("primary", "refuse"),
        }
        assert "secondary" not in scenario.next_tiers

    def test_slow_normal_says_which_policy_it_sets_and_must_never_trip(self):
        scenario = SCENARIOS["slow_normal"]
        assert scenario.policy["p95_latency_s"] > 8 and "p95 limit 10 s" in scenario.description
        assert scenario.faults["primary"] == {"mode": "slow", "delay_ms": 6000, "jitter_ms": 2000}
        assert scenario.expect.breaker_opens is False


class TestOutAndBackIn:
    """The cold and total-outage scenarios' measures: the faulted tier's first answer from the
    start, and the first real answer after the clear."""

    def test_a_loading_primary_serves_again_within_its_bound_or_it_is_a_violation(self):
        expect = SCENARIOS["cold_load"].expect
        samples = [ok(i / 2, 0.05, "secondary") for i in range(16)] + [ok(8.2, 1.0)]
        found = inputs(samples, fault_at=0.0, clear_at=None, next_tiers=None, expect=expect)
        built = report.build(found)
        assert built.faulted_first_answer_s == 9.2 and built.violations == []
        late = inputs(samples[:-1] + [ok(10.5, 1.0)], fault_at=0.0, clear_at=None,
                      next_tiers=None, expect=expect)  # fmt: skip
        assert report.build(late).violations == [
            "the faulted tier answered a client after 11.50 s (within 10 s of the start expected)"
        ]
        assert "faulted tier served" in report_text.text(built, scenario="cold_load",
                                                         description="")  # fmt: skip

    def test_the_first_real_answer_after_a_total_outage_is_timed_from_the_clear(self):
        expect = SCENARIOS["total_outage"].expect
        stand_ins = [ok(2 + i / 5, 0.02, "static") for i in range(50)]
        found = inputs(
            stand_ins + [ok(12.5, 0.1, "secondary")], clear_at=12.0,
            next_tiers=("static",), expect=expect,
        )  # fmt: skip
        built = report.build(found)
        assert built.real_answer_after_clear_s == 0.6
        assert not [v for v in built.violations if "real answer" in v or "2 s" in v]
        none = report.build(inputs(stand_ins, clear_at=12.0, next_tiers=("static",),
                                   expect=expect))  # fmt: skip
        assert "the first real answer came never (within 5 s of it expected)" in none.violations

    def test_a_request_waiting_on_a_dead_provider_breaks_the_total_outage(self):
        expect = SCENARIOS["total_outage"].expect
        samples = [ok(2.0, 2.5, "static"), ok(13.0, 0.1, "primary")]
        built = report.build(inputs(samples, clear_at=12.0, next_tiers=("static",), expect=expect))
        assert "1 requests waited more than 2 s (at most 0 expected)" in built.violations

    def test_a_cold_scenario_breaks_the_primary_at_the_start_for_the_whole_run(self):
        for name in ("cold_blackhole", "cold_load"):
            scenario = SCENARIOS[name]
            assert scenario.cold and scenario.fault_at_s == 0.0
            actions = timeline(scenario, fault_at=0.0, fault_for=None, duration=20.0)
            assert [(a.at, a.target, a.op) for a in actions] == [(0.0, "primary", "fault")]
