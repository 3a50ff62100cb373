"""One short drill, end to end: the embedded gateway (its own SQLite, uvicorn process and fake
providers), the primary refusing connections mid-run under a steady load."""

from __future__ import annotations

import pytest

from devtools.drill.runner import Options, execute

# The drill starts its own gateway on its own database: it touches neither this pass's test
# database nor its shared state, so it runs in the embedded pass.
pytestmark = [pytest.mark.slow, pytest.mark.backend_free]


def test_a_refused_primary_costs_no_client_an_error_and_the_ledger_holds_every_request():
    outcome = execute(
        Options(scenario="refused", rate=10, duration_s=6, fault_at_s=1.5, fault_for_s=3)
    )
    built = outcome.report
    assert built.requests == 60
    assert built.client_errors == 0, built.errors_by_kind
    assert (built.ledger["matched"], built.ledger["client_rows"]) == (60, 60)
    assert built.ledger["ids_missing"] == 0
    assert built.ledger_ok is True
    assert built.tiers.get("secondary", 0) > 0  # traffic moved while the primary refused
    # Read from the ledger's rows and times: once open, no process called the primary again.
    assert built.late_admissions is not None
    assert built.late_admissions["calls"] == 0
    # The targets, measured: the primary's timeout was read back, none waited it out.
    assert built.full_timeout_waits == 0
    assert built.fault_to_next_tier_s is not None and built.fault_to_next_tier_s <= 2
    assert built.violations == []
    assert "PASSED" in outcome.text


def test_a_primary_hung_from_the_first_request_keeps_no_client_waiting():
    outcome = execute(Options(scenario="cold_blackhole", rate=20, duration_s=6))
    built = outcome.report
    assert built.client_errors == 0, built.errors_by_kind
    assert built.answered_within_2s_pct >= 95.0
    assert built.tiers == {"secondary": 120}
    assert built.ledger["attempts"]["ollama-local: slow_first_byte"] >= 1
    assert built.violations == [], outcome.text


def test_a_loading_primary_is_not_punished_and_serves_again_across_two_processes():
    outcome = execute(Options(scenario="cold_load", rate=5, duration_s=12, processes=2))
    built = outcome.report
    assert built.client_errors == 0, built.errors_by_kind
    assert not built.breaker_opened
    assert built.faulted_first_answer_s is not None and built.faulted_first_answer_s <= 10
    assert built.violations == [], outcome.text


def test_after_a_total_outage_the_first_real_answer_comes_at_once():
    outcome = execute(
        Options(scenario="total_outage", rate=5, duration_s=18, fault_at_s=2, fault_for_s=12)
    )
    built = outcome.report
    assert built.client_errors == 0 and built.waits_over_2s == 0
    # The cooldown had grown past the clear (5 s, then 10 s): the trickle found it back.
    assert built.real_answer_after_clear_s is not None and built.real_answer_after_clear_s <= 5
    assert built.violations == [], outcome.text
