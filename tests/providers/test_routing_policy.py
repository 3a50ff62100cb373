"""What the policy makes of a request's walk, at `route()` (the `bench` fixture,
`route_bench.py`): the cloud refused to a caller, tasks kept local or kept from a stand-in,
the kill switch, the request's deadline and a provider's timeout; on the memory store and on
Redis."""

from __future__ import annotations

import time

from gateway.engine.breaker import State
from gateway.routing.walk import Tier


async def test_allow_cloud_false_with_the_primary_down_never_touches_the_cloud(
    bench, primary, secondary
):
    primary.stop()
    result = await bench.ask("How do I reset my password?", allow_cloud=False)
    assert result.tier == Tier.STATIC
    assert secondary.calls == 0


async def test_a_local_only_task_stays_local(bench, primary, secondary):
    bench.policy(local_only_tasks=frozenset({"medical", "legal"}))
    primary.stop()
    result = await bench.ask("Summarise this contract.", task="legal")
    assert result.tier == Tier.DEGRADED and secondary.calls == 0
    result = await bench.ask("Summarise this contract.", task="summary")
    assert result.provider == "openai-cloud"


async def test_a_no_fallback_task_gets_a_503_rather_than_a_degraded_answer(
    bench, primary, secondary
):
    bench.policy(no_fallback_tasks=frozenset({"dosage"}))
    primary.stop()
    secondary.stop()
    result = await bench.ask("What are your opening hours?", task="dosage")
    assert result.status == 503
    assert result.error is not None and result.error.code == "providers_unavailable"


async def test_kill_switch_static_only_makes_no_upstream_call(bench, primary, secondary):
    bench.policy(kill_switch="static_only")
    result = await bench.ask("Do you offer refunds?")
    assert result.tier == Tier.STATIC
    assert (primary.calls, secondary.calls) == (0, 0)
    assert result.reason == "kill_switch_static_only" and result.attempts == []


async def test_kill_switch_forcing_a_provider_sends_everything_there(bench, primary, secondary):
    bench.policy(kill_switch="force_provider", kill_switch_provider="openai-cloud")
    assert (await bench.ask()).provider == "openai-cloud"
    assert primary.calls == 0


async def test_a_hanging_primary_still_gets_an_answer_within_the_deadline(bench, primary):
    bench.policy(request_deadline_s=1.0)
    primary.set_fault(mode="hang")
    started = time.monotonic()
    result = await bench.ask()
    assert time.monotonic() - started < 2.0  # the deadline (1 s), not the provider's 5 s
    assert result.tier in (Tier.STATIC, Tier.DEGRADED)
    assert result.attempts[0].error_class == "timeout"
    assert result.attempts[1].error_class == "deadline_exceeded"


async def test_a_hanging_primary_with_a_short_timeout_fails_over_in_time(bench, primary):
    bench.provider("ollama-local", timeout_s=0.3)
    bench.policy(request_deadline_s=3.0)
    primary.set_fault(mode="hang")
    started = time.monotonic()
    assert (await bench.ask()).provider == "openai-cloud"
    assert time.monotonic() - started < 2.0


async def test_timeouts_count_as_slow_calls_as_the_error_table_says(bench, primary):
    # Two timeouts in four calls: a 50 % failure rate stays under its 60 % limit, but as slow
    # calls (the error table's rule for a timeout) they reach the 50 % slow-call limit. The
    # timeout leaves an answering call room on a loaded machine: one that timed out too would
    # make it three failures in four.
    bench.provider("ollama-local", timeout_s=1.0)
    bench.policy(
        consecutive_failures=10, failure_rate_pct=60, failure_min_calls=4, slow_call_rate_pct=50
    )
    for fault in ("ok", "hang", "ok", "hang"):
        primary.set_fault(mode=fault)
        await bench.ask(use_cache=False)
    state, _ = await bench.ports.store.read("ollama-local")
    assert (state.state, state.reason) == (State.OPEN, "slow_calls")
