"""One short drill, end to end: the embedded gateway (its own SQLite, uvicorn process and fake
providers), the primary refusing connections mid-run under a steady load."""

from __future__ import annotations

import pytest

from failover_site.drill.runner import Options, execute

# The drill starts its own gateway on its own database: it touches neither this pass's test
# database nor its shared state, so it runs in the embedded pass.
pytestmark = pytest.mark.backend_free


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
