"""The answer cache tier end to end: the real ASGI app and router, fake providers over loopback,
the cache in this pass's state store (memory, or Redis in the services pass).

Between the providers and the static answers by default (`fallback`); before the providers
when the policy saves cost with it (`cost_saver`); nowhere when it is off or the request says
`"cache": false`. Only a whole, good answer is ever kept."""

from __future__ import annotations

import pytest

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.engine.clients import SHARED_CACHE
from gateway.routing.answer_cache import answer_key, cache_read
from gateway.routing.cascade import CACHED_NOTICE, RouteRequest, RouteResult, finish_stream, route
from tests.providers.conftest import ask, ledger_rows, update_policy

pytestmark = pytest.mark.django_db(transaction=True)

# No static answer comes near it: without a provider or the cache it gets the apology.
QUESTION = "Write me a sonnet about turnips."
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
FAQ_QUESTION = "What are your opening hours?"
# The answer cache's scope of the suite's client app (`make_client_app(name="suite")`).
SUITE = "app:suite"


def both_down(primary, secondary) -> None:
    primary.stop()
    secondary.stop()


async def test_a_good_answer_is_served_from_the_cache_when_every_provider_is_down(
    api, gateway, clock, primary, secondary
):
    first = await ask(api, QUESTION)
    assert first.json()["provider"] == "ollama-local"
    both_down(primary, secondary)
    clock.advance(90)

    response = await ask(api, "  write ME a   sonnet about TURNIPS. ")

    body = response.json()
    assert response.status_code == 200
    assert body["text"] == PRIMARY_TEXT
    assert (body["tier"], body["provider"], body["is_fallback"]) == ("cache", None, True)
    assert body["degradation_notice"] == CACHED_NOTICE
    assert "may be out of date" in body["degradation_notice"]
    assert response.headers["X-Failover-Tier"] == "cache"
    assert response.headers["X-Failover-Cache-Age"] == "90"
    assert "X-Failover-Cache-Age" not in first.headers
    _, record = await ledger_rows(gateway)
    assert str(record.request_id) == body["request_id"]
    assert (record.tier, record.outcome, record.cache_hit) == ("cache", "fallback", True)
    assert record.final_provider == ""
    assert [(a["provider"], a["outcome"]) for a in record.attempts] == [
        ("ollama-local", "error"),
        ("openai-cloud", "error"),
    ]
    assert record.reason == "primary_refused"


async def test_the_answer_cached_is_the_one_that_was_served_even_from_the_secondary(
    api, gateway, primary, secondary
):
    primary.set_fault(mode="error", status=503)
    assert (await ask(api, QUESTION)).json()["provider"] == "openai-cloud"
    both_down(primary, secondary)

    body = (await ask(api, QUESTION)).json()

    assert (body["tier"], body["text"]) == ("cache", SECONDARY_TEXT)


async def test_the_cache_comes_before_the_static_answers(api, gateway, primary, secondary):
    await ask(api, FAQ_QUESTION)
    both_down(primary, secondary)

    body = (await ask(api, FAQ_QUESTION)).json()

    assert (body["tier"], body["text"]) == ("cache", PRIMARY_TEXT)


async def test_with_nothing_cached_the_static_answer_or_the_apology_comes_as_before(
    api, gateway, primary, secondary
):
    both_down(primary, secondary)

    static = (await ask(api, FAQ_QUESTION)).json()
    degraded = (await ask(api, QUESTION)).json()

    assert (static["tier"], static["is_fallback"]) == ("static", True)
    assert "09:00" in static["text"]
    assert (degraded["tier"], degraded["is_fallback"]) == ("degraded", True)
    assert degraded["text"].startswith("Sorry, our assistant is temporarily unavailable")
    records = await ledger_rows(gateway)
    assert [r.cache_hit for r in records] == [False, False]


async def test_a_request_that_says_cache_false_is_not_stored(api, gateway, primary, secondary):
    assert (await ask(api, QUESTION, cache=False)).json()["provider"] == "ollama-local"
    both_down(primary, secondary)

    body = (await ask(api, QUESTION)).json()

    assert body["tier"] == "degraded"


async def test_a_request_that_says_cache_false_is_not_served_from_it(
    api, gateway, primary, secondary
):
    await ask(api, QUESTION)
    both_down(primary, secondary)

    refused = await ask(api, QUESTION, cache=False)
    served = await ask(api, QUESTION)

    assert refused.json()["tier"] == "degraded"
    assert "X-Failover-Cache-Age" not in refused.headers
    assert served.json()["tier"] == "cache"  # it was there all along
    refused_record, _ = (await ledger_rows(gateway))[1:]
    assert refused_record.cache_hit is False


async def test_with_the_cache_off_nothing_is_stored(api, gateway, primary, secondary):
    await update_policy(gateway, cache_mode="off")
    await ask(api, QUESTION)
    await update_policy(gateway, cache_mode="fallback")
    both_down(primary, secondary)

    assert (await ask(api, QUESTION)).json()["tier"] == "degraded"


async def test_with_the_cache_off_nothing_is_served(api, gateway, primary, secondary):
    await ask(api, QUESTION)
    await update_policy(gateway, cache_mode="off")
    both_down(primary, secondary)

    assert (await ask(api, QUESTION)).json()["tier"] == "degraded"
    await update_policy(gateway, cache_mode="fallback")
    assert (await ask(api, QUESTION)).json()["tier"] == "cache"  # stored before it was off


async def test_cost_saver_serves_a_repeated_question_without_asking_a_provider(
    api, gateway, clock, primary, secondary
):
    await update_policy(gateway, cache_mode="cost_saver")
    first = (await ask(api, QUESTION)).json()
    assert first["provider"] == "ollama-local"
    calls = (primary.calls, secondary.calls)
    clock.advance(30)

    response = await ask(api, QUESTION.upper())

    body = response.json()
    assert (primary.calls, secondary.calls) == calls
    assert body["text"] == PRIMARY_TEXT
    assert (body["tier"], body["is_fallback"], body["degradation_notice"]) == (
        "cache",
        False,
        None,
    )
    assert response.headers["X-Failover-Cache-Age"] == "30"
    _, record = await ledger_rows(gateway)
    assert (record.tier, record.outcome, record.cache_hit) == ("cache", "ok", True)
    assert record.reason == "cache_cost_saver"
    assert record.attempts == []
    assert record.cost == 0


async def test_cost_saver_leaves_no_fallback_tasks_to_the_providers(api, gateway, primary):
    await update_policy(gateway, cache_mode="cost_saver", no_fallback_tasks="legal")
    await ask(api, QUESTION, task="legal")
    calls = primary.calls
    again = (await ask(api, QUESTION, task="legal")).json()
    assert again["tier"] == "primary" and primary.calls == calls + 1


async def test_cost_saver_leaves_a_provider_asked_for_by_name_to_answer(gateway, primary):
    await update_policy(gateway, cache_mode="cost_saver")
    completion = CompletionRequest(prompt=QUESTION)
    await route(RouteRequest(completion, "r-1"), gateway)
    named = await route(RouteRequest(completion, "r-2", prefer="ollama-local"), gateway)
    assert (named.tier, named.provider) == ("primary", "ollama-local")


async def test_cost_saver_still_asks_a_provider_for_a_new_question(api, gateway, primary):
    await update_policy(gateway, cache_mode="cost_saver")
    await ask(api, QUESTION)

    body = (await ask(api, "Write me a haiku about leeks.")).json()

    assert body["provider"] == "ollama-local"
    assert primary.calls == 2


async def test_cost_saver_asks_a_provider_when_the_request_says_cache_false(api, gateway, primary):
    await update_policy(gateway, cache_mode="cost_saver")
    await ask(api, QUESTION)

    body = (await ask(api, QUESTION, cache=False)).json()

    assert (body["tier"], body["provider"]) == ("primary", "ollama-local")
    assert primary.calls == 2


async def test_nothing_is_cached_from_a_failed_answer(api, gateway, primary, secondary):
    primary.set_fault(mode="cut_stream")  # half a body, then the connection dropped
    secondary.set_fault(mode="malformed")
    assert (await ask(api, QUESTION)).json()["tier"] == "degraded"

    body = (await ask(api, QUESTION)).json()

    assert body["tier"] == "degraded"
    key = answer_key(CompletionRequest(prompt=QUESTION), scope=SUITE)
    assert await cache_read(gateway.store, key) is None


@pytest.mark.parametrize(
    ("question", "tier"),
    [(QUESTION, "degraded"), (FAQ_QUESTION, "static")],
    ids=["degraded", "static"],
)
async def test_a_fallback_answer_is_never_cached_for_cost_saver_to_serve_later(
    api, gateway, primary, secondary, question, tier
):
    await update_policy(gateway, cache_mode="cost_saver")
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error", status=503)
    assert (await ask(api, question)).json()["tier"] == tier
    primary.set_fault(mode="ok")
    secondary.set_fault(mode="ok")

    body = (await ask(api, question)).json()

    assert (body["tier"], body["text"]) == ("primary", PRIMARY_TEXT)


@pytest.mark.parametrize(
    "variation",
    [{"max_tokens": 5}, {"temperature": 0.2}, {"system_prompt": "Answer in French."}],
    ids=["max_tokens", "temperature", "system_prompt"],
)
async def test_different_parameters_are_a_different_cache_entry(
    api, gateway, primary, secondary, variation
):
    await ask(api, QUESTION)
    both_down(primary, secondary)

    varied = (await ask(api, QUESTION, **variation)).json()
    same = (await ask(api, QUESTION)).json()

    assert varied["tier"] == "degraded"
    assert same["tier"] == "cache"


async def test_an_answer_with_parameters_is_served_only_with_the_same_parameters(
    api, gateway, primary, secondary
):
    await ask(api, QUESTION, max_tokens=3, temperature=0.2)
    both_down(primary, secondary)

    plain = (await ask(api, QUESTION)).json()
    same = (await ask(api, QUESTION, temperature=0.2, max_tokens=3)).json()

    assert plain["tier"] == "degraded"
    assert (same["tier"], same["text"]) == ("cache", "Hello from the")


async def test_the_static_only_kill_switch_does_not_serve_the_cache(
    api, gateway, primary, secondary
):
    await ask(api, FAQ_QUESTION)
    await ask(api, QUESTION)
    await update_policy(gateway, kill_switch="static_only", kill_switch_reason="drill")

    static = (await ask(api, FAQ_QUESTION)).json()
    degraded = (await ask(api, QUESTION)).json()

    assert static["tier"] == "static" and "09:00" in static["text"]
    assert degraded["tier"] == "degraded"
    assert primary.calls == 2
    records = await ledger_rows(gateway)
    assert [r.cache_hit for r in records[2:]] == [False, False]


async def test_the_static_only_kill_switch_does_not_serve_the_cache_in_cost_saver_mode(
    api, gateway, primary
):
    await update_policy(gateway, cache_mode="cost_saver")
    await ask(api, QUESTION)
    await update_policy(gateway, kill_switch="static_only", kill_switch_reason="drill")

    body = (await ask(api, QUESTION)).json()

    assert body["tier"] == "degraded"


# Streamed answers: routed straight through the router, as the streaming endpoint does --------


def streamed(prompt: str = QUESTION) -> RouteRequest:
    return RouteRequest(
        completion=CompletionRequest(prompt=prompt), request_id="stream-test", stream=True
    )


async def read_to_the_end(result: RouteResult) -> ProviderError | None:
    assert result.stream is not None
    try:
        async for _ in result.stream.rest():
            pass
    except ProviderError as exc:
        return exc
    return None


async def cached_text(gateway, prompt: str = QUESTION) -> str | None:
    key = answer_key(CompletionRequest(prompt=prompt), scope=SHARED_CACHE)  # route()'s default
    hit = await cache_read(gateway.store, key)
    return None if hit is None else hit.text


async def test_a_whole_streamed_answer_is_cached_once_it_has_ended(api, gateway, primary):
    result = await route(streamed(), gateway)
    assert result.provider == "ollama-local" and result.stream is not None
    assert await cached_text(gateway) is None  # not before its end

    result = await finish_stream(result, await read_to_the_end(result))

    assert await cached_text(gateway) == PRIMARY_TEXT
    assert result.outcome == "ok"


async def test_a_streamed_answer_cut_midway_is_not_cached(api, gateway, primary, secondary):
    primary.set_fault(mode="cut_stream", delay_ms=100)
    result = await route(streamed(), gateway)
    assert result.provider == "ollama-local" and result.text == "Hello"

    error = await read_to_the_end(result)
    assert error is not None
    result = await finish_stream(result, error)

    assert result.interrupted and result.outcome == "failed"
    assert await cached_text(gateway) is None
    both_down(primary, secondary)
    assert (await ask(api, QUESTION)).json()["tier"] == "degraded"


async def test_a_streamed_answer_the_client_abandoned_is_not_cached(api, gateway, primary):
    primary.set_fault(chunk_delay_ms=100)
    result = await route(streamed(), gateway)
    assert result.stream is not None
    await result.stream.aclose()

    result = await finish_stream(result, None, client_gone=True)

    assert result.reason == "client_disconnected"
    assert await cached_text(gateway) is None
