"""Context windows checked before the call, and the empty answer: a conversation estimated over
a provider's window goes to one with a larger window without a call or a breaker failure; an
empty 200 is a malformed answer, unless the prompt filled half the window or more (a server
whose real context is smaller than its row says answers so), when it is "context too long"."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from providers.models import Provider
from tests.providers.conftest import ledger_rows
from tests.spec import sse_events

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/chat/completions"
SMALL_WINDOW = 256


def _asking(chars: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": ("word " * (chars // 5)).strip() + "?"}]


def _answer(response, stream: bool) -> str:
    assert response.status_code == 200
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    chunks = [event for event in sse_events(response.text) if event != "[DONE]"]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


async def _small_primary() -> None:
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(
        context_window=SMALL_WINDOW
    )


async def test_a_conversation_over_a_providers_window_goes_to_a_larger_one_uncalled(
    api, gateway, primary
):
    await _small_primary()
    response = await api.post(URL, json={"model": "auto", "messages": _asking(1200)})
    assert response.json()["model"] == "openai-cloud"
    assert primary.calls == 0
    [record] = await ledger_rows(gateway)
    assert record.attempts[0] == {
        "provider": "ollama-local",
        "outcome": "skipped",
        "error_class": "context_too_small",
    }
    state, _ = await gateway.store.read("ollama-local")
    assert state.consecutive_failures == 0


async def test_the_answers_length_counts_toward_the_window(api, gateway, primary):
    await _small_primary()
    short = _asking(200)
    assert (await api.post(URL, json={"model": "auto", "messages": short})).json()[
        "model"
    ] == "ollama-local"
    asked = {"model": "auto", "messages": short, "max_tokens": SMALL_WINDOW}
    assert (await api.post(URL, json=asked)).json()["model"] == "openai-cloud"


async def test_a_conversation_over_every_window_is_the_clients_400(
    api, gateway, primary, secondary
):
    await sync_to_async(Provider.objects.update)(context_window=SMALL_WINDOW)
    response = await api.post(URL, json={"model": "auto", "messages": _asking(2000)})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert f"the largest context window here is {SMALL_WINDOW}" in error["message"]
    assert primary.calls == secondary.calls == 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_empty_answer_is_a_malformed_one_that_counts_against_the_breaker(
    api, gateway, primary, stream
):
    primary.set_fault(text="")
    response = await api.post(
        URL, json={"model": "auto", "messages": _asking(50), "stream": stream}
    )
    assert _answer(response, stream) == "Hello from the cloud model."
    [record] = await ledger_rows(gateway)
    assert record.attempts[0]["error_class"] == "malformed"
    state, _ = await gateway.store.read("ollama-local")
    assert state.consecutive_failures == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_empty_answer_to_a_prompt_near_the_window_is_context_too_long(
    api, gateway, primary, stream
):
    await _small_primary()
    primary.set_fault(text="")
    # About 150 of the window's 256 tokens: under it, so the provider is called.
    response = await api.post(
        URL, json={"model": "auto", "messages": _asking(600), "stream": stream}
    )
    assert _answer(response, stream) == "Hello from the cloud model."
    assert primary.calls == 1
    [record] = await ledger_rows(gateway)
    assert record.attempts[0]["error_class"] == "context_too_long"
    state, _ = await gateway.store.read("ollama-local")
    assert state.consecutive_failures == 0
