"""The hedged strategy end to end, through /api/v1/complete with fake providers over loopback
(the weighted and priority strategies are tested at `route()`: `test_weighted_strategy.py`).

A provider that hasn't answered within `hedge_after_ms` gets company from the next one; the
first good answer wins and the loser is cancelled, uncharged."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.adapters.messages import CompletionRequest
from gateway.engine.breaker import State
from gateway.routing.cascade import RouteRequest, finish_stream, route
from gateway.state.contract import Windows
from tests.providers.conftest import ask, ledger_rows, update_policy

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
# Behaviour bounds, not benchmarks: generous against a busy machine.
HEDGE_BOUND_S = 2.0


async def timed_ask(api, prompt: str = "Say hello.", **fields: Any) -> tuple[dict, float]:
    started = time.monotonic()
    response = await ask(api, prompt, **fields)
    assert response.status_code == 200
    return response.json(), time.monotonic() - started


def outcomes(record) -> dict[str, str]:
    return {attempt["provider"]: attempt["outcome"] for attempt in record.attempts}


async def primary_breaker(gateway):
    state, _ = await gateway.store.read("ollama-local")
    policy = (await gateway.snapshots.current()).policy
    windows = Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)
    summary = await gateway.store.summary("ollama-local", windows, gateway.clock.wall())
    return state, summary


# Hedged ----------------------------------------------------------------------------------------


async def test_hedged_a_slow_primary_gets_company_and_the_secondary_answers(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="slow", delay_ms=3000)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)

    body, elapsed = await timed_ask(api)

    assert (body["provider"], body["text"]) == ("openai-cloud", SECONDARY_TEXT)
    assert 0.3 <= elapsed < HEDGE_BOUND_S  # hedge_after_ms plus the secondary's own time
    assert (primary.calls, secondary.calls) == (1, 1)
    [record] = await ledger_rows(gateway)
    assert outcomes(record) == {"ollama-local": "cancelled", "openai-cloud": "ok"}
    assert (record.tier, record.outcome, record.reason) == ("secondary", "ok", "hedged")
    cancelled = next(a for a in record.attempts if a["outcome"] == "cancelled")
    assert "error_class" not in cancelled
    # Cancelled once the secondary had answered, hedge_after_ms in (the hedge timer starts
    # before the primary's bookkeeping, so a few ms under 300 is still right).
    assert 250 <= cancelled["latency_ms"] < HEDGE_BOUND_S * 1000


async def test_hedged_the_cancelled_primary_is_not_charged_on_its_breaker(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="slow", delay_ms=3000)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)

    for _ in range(3):  # as many as consecutive failures that would open it
        assert (await ask(api)).json()["provider"] == "openai-cloud"

    state, summary = await primary_breaker(gateway)
    assert state.state == State.CLOSED
    assert state.consecutive_failures == 0
    assert summary.failures == 0
    primary.set_fault(mode="ok")
    assert (await ask(api)).json()["provider"] == "ollama-local"
    assert primary.calls == 4


async def test_hedged_a_cancelled_probe_gives_its_half_open_slot_back(
    api, gateway, clock, primary, secondary
):
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)
    primary.set_fault(mode="error", status=500)
    for _ in range(3):
        await ask(api)
    state, _ = await primary_breaker(gateway)
    assert state.state == State.OPEN
    clock.advance(61)  # past the cooldown: the next calls are half-open probes
    primary.set_fault(mode="slow", delay_ms=3000)
    for _ in range(3):  # each probe loses its race to the secondary and is cancelled
        assert (await ask(api)).json()["provider"] == "openai-cloud"
    primary.set_fault(mode="ok")  # the primary has recovered

    answers = [(await ask(api)).json()["provider"] for _ in range(3)]

    # A cancelled probe proved nothing either way: the recovered primary is probed again at
    # once, and three good probes close its breaker.
    assert answers == ["ollama-local"] * 3
    state, _ = await primary_breaker(gateway)
    assert state.state == State.CLOSED


async def test_hedged_a_fast_primary_never_calls_the_secondary(api, gateway, primary, secondary):
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)

    answers = [(await timed_ask(api))[0] for _ in range(5)]

    assert {a["provider"] for a in answers} == {"ollama-local"}
    assert (primary.calls, secondary.calls) == (5, 0)
    records = await ledger_rows(gateway)
    assert all(outcomes(r) == {"ollama-local": "ok"} for r in records)


async def test_hedged_a_primary_failing_fast_sends_the_secondary_in_at_once(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="error", status=500)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=5000)

    body, elapsed = await timed_ask(api)

    assert body["provider"] == "openai-cloud"
    assert elapsed < HEDGE_BOUND_S  # not after hedge_after_ms (5 s)
    [record] = await ledger_rows(gateway)
    assert [(a["provider"], a["outcome"]) for a in record.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "ok"),
    ]
    assert record.attempts[0]["error_class"] == "server_error"
    assert record.reason == "primary_server_error"


async def test_hedged_the_first_good_answer_wins_even_when_it_is_the_first_providers(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="slow", delay_ms=600)
    secondary.set_fault(mode="slow", delay_ms=3000)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=200)

    body, elapsed = await timed_ask(api)

    assert (body["provider"], body["tier"]) == ("ollama-local", "primary")
    assert 0.6 <= elapsed < HEDGE_BOUND_S
    assert secondary.calls == 1
    [record] = await ledger_rows(gateway)
    assert outcomes(record) == {"ollama-local": "ok", "openai-cloud": "cancelled"}
    assert record.reason == ""
    state, _ = await gateway.store.read("openai-cloud")
    assert state.consecutive_failures == 0


async def test_hedged_a_hedge_that_fails_leaves_the_slow_primary_to_answer(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="slow", delay_ms=800)
    secondary.set_fault(mode="error", status=503)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=200)

    body, elapsed = await timed_ask(api)

    assert body["provider"] == "ollama-local"
    assert 0.8 <= elapsed < HEDGE_BOUND_S
    [record] = await ledger_rows(gateway)
    assert outcomes(record) == {"ollama-local": "ok", "openai-cloud": "error"}


async def test_hedged_both_failing_falls_back_as_before(api, gateway, primary, secondary):
    primary.set_fault(mode="error", status=500)
    secondary.set_fault(mode="error", status=503)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)

    body, elapsed = await timed_ask(api, "What are your opening hours?")

    assert (body["tier"], body["is_fallback"]) == ("static", True)
    assert elapsed < HEDGE_BOUND_S


async def test_hedged_a_stream_slow_to_its_first_token_loses_to_the_next_provider(
    gateway, primary, secondary
):
    primary.set_fault(mode="stall", delay_ms=3000)  # within the time to first token (10 s)
    await update_policy(gateway, strategy="hedged", hedge_after_ms=300)
    request = RouteRequest(
        completion=CompletionRequest(prompt="Say hello."), request_id="hedged-stream", stream=True
    )

    started = time.monotonic()
    result = await route(request, gateway)
    assert result.stream is not None
    rest = [piece async for piece in result.stream.rest()]
    result = await finish_stream(result)
    elapsed = time.monotonic() - started

    assert result.provider == "openai-cloud"
    assert result.stream.first + "".join(rest) == SECONDARY_TEXT == result.text
    assert 0.3 <= elapsed < HEDGE_BOUND_S
    assert {a.provider: a.outcome for a in result.attempts} == {
        "ollama-local": "cancelled",
        "openai-cloud": "ok",
    }
    state, summary = await primary_breaker(gateway)
    assert state.consecutive_failures == 0 and summary.failures == 0
