"""The in-flight limit: past a provider's `max_in_flight` calls waiting on it in this process,
a request goes to the next provider at once instead of queueing behind a provider that may be
stuck."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from gateway.routing.in_flight import InFlight
from runtime.gateway import settings_for_clients
from tests.providers.conftest import ask, ledger_rows, update_policy


class TestTheCount:
    pytestmark = pytest.mark.backend_free

    def test_it_admits_up_to_the_limit_and_frees_a_place_as_a_call_ends(self):
        in_flight = InFlight()
        assert [in_flight.take("ollama", 2) for _ in range(3)] == [True, True, False]
        in_flight.give("ollama")
        assert in_flight.take("ollama", 2)
        assert in_flight.count("ollama") == 2

    def test_zero_is_no_limit(self):
        in_flight = InFlight()
        assert all(in_flight.take("ollama", 0) for _ in range(1000))

    def test_the_connection_pool_has_room_for_every_call_the_limit_admits(self):
        from gateway.adapters.pool import MAX_CONNECTIONS, make_client, pool_size
        from gateway.engine.config import ProviderConfig

        base = {
            "name": "ollama", "kind": "ollama", "base_url": "http://127.0.0.1:1", "model": "m",
            "priority": 1, "is_local": True, "timeout_s": 15.0, "context_window": 8192,
        }  # fmt: skip
        assert pool_size(ProviderConfig(**base, max_in_flight=16)) == MAX_CONNECTIONS == 256
        # A model that takes 6 s at 50 requests a second has 300 calls waiting: none may queue
        # in the pool, unseen by the limit (and streams past their first token still read).
        assert pool_size(ProviderConfig(**base, max_in_flight=400)) == 800
        client = make_client(ProviderConfig(**base, max_in_flight=400), settings_for_clients())
        assert client._transport._limits.max_connections == 800  # what the transport was given


async def _timed(request) -> tuple[float, dict]:
    started = time.monotonic()
    response = await request
    return time.monotonic() - started, response.json()


async def test_past_the_limit_a_request_goes_to_the_next_provider_at_once(
    api, gateway, primary, secondary
):
    from providers.models import Provider

    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(max_in_flight=2)
    await update_policy(gateway)
    primary.set_fault(mode="slow", delay_ms=1300)
    answers = await asyncio.gather(*(_timed(ask(api, cache=False)) for _ in range(5)))
    local = [seconds for seconds, body in answers if body["provider"] == "ollama-local"]
    moved_on = [seconds for seconds, body in answers if body["provider"] == "openai-cloud"]
    assert len(local) == 2 and len(moved_on) == 3
    # The three never waited on the slow primary (1.3 s, under the 1.5 s first-byte bound of a
    # self-hosted provider): room to spare for a loaded machine.
    assert max(moved_on) < 0.9 and min(local) >= 1.3
    records = await ledger_rows(gateway)
    skipped = [r.attempts[0] for r in records if r.final_provider == "openai-cloud"]
    assert (
        skipped
        == [{"provider": "ollama-local", "outcome": "skipped", "error_class": "in_flight_limit"}]
        * 3
    )
    assert gateway.in_flight.count("ollama-local") == 0  # every place given back


async def test_a_place_is_given_back_whatever_the_call_ended_in(api, gateway, primary, secondary):
    from providers.models import Provider

    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(max_in_flight=1)
    await update_policy(gateway)
    for mode in ("error", "ok", "hang"):
        primary.set_fault(mode=mode)
        if mode == "hang":
            await update_policy(gateway, request_deadline_s=1.0)
        await ask(api, cache=False)
        assert gateway.in_flight.count("ollama-local") == 0, mode
    # A stream gives its place back at its first token.
    primary.set_fault(mode="ok")
    response = await api.post(
        "/v1/chat/completions",
        json={"model": "auto", "stream": True, "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert response.status_code == 200 and "[DONE]" in response.text
    assert gateway.in_flight.count("ollama-local") == 0
