"""`POST /v1/chat/completions` with `stream: true`, over a real socket (live_url): the official
SDK, and raw httpx where the timing of the bytes is the point.

The router waits for a provider's first token before anything is sent, so a provider that fails
before it is passed over unseen; from the first token on the answer is that provider's alone,
and a stream that breaks ends in an error event, never in another provider's text."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows, update_policy
from tests.providers.test_openai_endpoint import static_answer

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "Say hello."}]
PRIMARY_TEXT = "Hello from the local model."
SECONDARY_TEXT = "Hello from the cloud model."
STATIC_QUESTION = [{"role": "user", "content": "What are your opening hours?"}]


def sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def text_of(chunks: list[Any]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


async def stream_with_headers(
    live_url: str, messages: list[dict[str, Any]] = HELLO, **fields: Any
) -> tuple[httpx.Headers, list[Any]]:
    """Every chunk the SDK yields for a streamed request, and the response's headers."""
    async with sdk(live_url) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=messages, stream=True, **fields
        )
        chunks = [chunk async for chunk in raw.parse()]
    return raw.headers, chunks


async def raw_events(live_url: str, body: dict[str, Any]) -> list[str]:
    """The `data:` payloads of a streamed answer, as sent."""
    async with (
        httpx.AsyncClient(timeout=30, headers=AUTH) as http,
        http.stream("POST", live_url + "/v1/chat/completions", json=body) as response,
    ):
        events = [
            line.removeprefix("data: ")
            async for line in response.aiter_lines()
            if line.startswith("data: ")
        ]
    return events


async def the_ledger_row(gateway, timeout: float = 10.0) -> Any:
    """The one ledger row, once the stream has ended (it is written after the last byte)."""
    [row] = await ledger_rows(gateway, at_least=1, timeout=timeout)
    return row


# Who answers ------------------------------------------------------------------------------


async def test_a_stream_from_the_healthy_primary(live_url, gateway, primary, secondary):
    headers, chunks = await stream_with_headers(live_url)
    assert text_of(chunks) == PRIMARY_TEXT
    assert {chunk.model for chunk in chunks} == {"ollama-local"}
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    first, last = chunks[0], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert first.model_extra["failover"]["tier"] == "primary"
    assert (last.choices[0].delta.content, last.choices[0].finish_reason) == (None, "stop")
    assert headers["X-Failover-Tier"] == "primary"
    assert headers["content-type"].startswith("text/event-stream")
    assert (primary.calls, secondary.calls) == (1, 0)
    record = await the_ledger_row(gateway)
    assert (record.final_provider, record.tier, record.outcome) == ("ollama-local", "primary", "ok")
    assert (record.tokens_in, record.tokens_out) == (2, 5)


async def test_a_stream_from_the_secondary_when_the_primary_is_down(
    live_url, gateway, primary, secondary
):
    primary.stop()
    headers, chunks = await stream_with_headers(live_url)
    assert text_of(chunks) == SECONDARY_TEXT
    assert {chunk.model for chunk in chunks} == {"openai-cloud"}
    assert headers["X-Failover-Tier"] == "secondary"
    assert chunks[0].model_extra["failover"]["tier"] == "secondary"
    record = await the_ledger_row(gateway)
    assert (record.final_provider, record.reason) == ("openai-cloud", "primary_refused")


async def test_with_both_down_the_static_answer_streams_and_ends_with_done(
    live_url, primary, secondary
):
    primary.stop()
    secondary.stop()
    headers, chunks = await stream_with_headers(live_url, STATIC_QUESTION)
    assert text_of(chunks) == static_answer("opening hours")
    assert chunks[-1].choices[0].finish_reason == "stop"
    failover = chunks[0].model_extra["failover"]
    assert (failover["tier"], failover["is_fallback"]) == ("static", True)
    assert headers["X-Failover-Tier"] == "static"
    # As sent: JSON events, then the end marker the SDK stopped at.
    body = {"model": "auto", "messages": STATIC_QUESTION, "stream": True}
    events = await raw_events(live_url, body)
    assert events[-1] == "[DONE]"
    assert all("choices" in json.loads(event) for event in events[:-1])


async def test_include_usage_adds_a_last_chunk_with_the_usage_and_no_choices(
    live_url, primary, secondary
):
    _, chunks = await stream_with_headers(live_url, stream_options={"include_usage": True})
    *answer, last = chunks
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        2,
        5,
        7,
    )
    assert all(chunk.usage is None for chunk in answer)
    assert text_of(answer) == PRIMARY_TEXT


async def test_a_stream_cut_at_max_tokens_finishes_with_length(live_url, primary, secondary):
    _, chunks = await stream_with_headers(live_url, max_completion_tokens=2)
    assert text_of(chunks) == "Hello from"
    assert chunks[-1].choices[0].finish_reason == "length"


# A stream that breaks, one that is slow to start, a client that leaves --------------------


async def test_a_stream_cut_after_its_first_chunk_ends_in_an_error_with_nothing_spliced_in(
    live_url, gateway, primary, secondary
):
    primary.set_fault(mode="cut_stream", delay_ms=200)
    received: list[Any] = []
    async with sdk(live_url) as client:
        stream = await client.chat.completions.create(model="auto", messages=HELLO, stream=True)
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received.append(chunk)
    assert caught.value.code == "stream_interrupted"
    text = text_of(received)
    assert text and PRIMARY_TEXT.startswith(text) and text != PRIMARY_TEXT
    assert "cloud" not in text
    assert all(chunk.choices[0].finish_reason is None for chunk in received)
    assert secondary.calls_to("/v1/chat/completions") == 0 and secondary.calls == 0
    record = await the_ledger_row(gateway)
    assert (record.outcome, record.reason, record.final_provider) == (
        "failed",
        "stream_interrupted",
        "ollama-local",
    )
    [attempt] = record.attempts
    assert (attempt["provider"], attempt["outcome"]) == ("ollama-local", "error")
    assert attempt["error_class"] == "refused"
    assert attempt["detail"].startswith("after the first token")


async def test_a_stream_that_breaks_before_its_first_token_fails_over_unseen(
    live_url, gateway, primary, secondary
):
    primary.set_fault(mode="malformed")  # the first line broken off mid-JSON
    headers, chunks = await stream_with_headers(live_url)
    assert text_of(chunks) == SECONDARY_TEXT
    assert headers["X-Failover-Provider"] == "openai-cloud"
    record = await the_ledger_row(gateway)
    assert [(a["provider"], a["outcome"], a.get("error_class")) for a in record.attempts] == [
        ("ollama-local", "error", "malformed"),
        ("openai-cloud", "ok", None),
    ]
    assert (record.outcome, record.reason) == ("ok", "primary_malformed")


async def test_a_primary_slow_to_its_first_token_is_passed_over_before_a_byte_is_sent(
    live_url, gateway, primary, secondary
):
    await update_policy(gateway, first_token_timeout_s=0.5)
    primary.set_fault(mode="stall", delay_ms=3000)
    body = {"model": "auto", "messages": HELLO, "stream": True}
    started = time.monotonic()
    async with (
        httpx.AsyncClient(timeout=30, headers=AUTH) as http,
        http.stream("POST", live_url + "/v1/chat/completions", json=body) as response,
    ):
        # The status line and headers came only once the secondary had its first token.
        headers_after = time.monotonic() - started
        assert response.headers["X-Failover-Provider"] == "openai-cloud"
        assert response.headers["X-Failover-Tier"] == "secondary"
        sent = (await response.aread()).decode()
    assert 0.45 <= headers_after < 2.5  # the time to first token, not the primary's 3 s stall
    events = [line[6:] for line in sent.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    pieces = [
        json.loads(event)["choices"][0]["delta"].get("content") or "" for event in events[:-1]
    ]
    assert "".join(pieces) == SECONDARY_TEXT
    assert "local" not in sent
    record = await the_ledger_row(gateway)
    assert [(a["provider"], a["outcome"], a.get("error_class")) for a in record.attempts] == [
        ("ollama-local", "error", "timeout"),
        ("openai-cloud", "ok", None),
    ]
    assert (record.outcome, record.reason) == ("ok", "primary_timeout")


async def test_a_client_that_hangs_up_mid_stream_is_recorded_as_client_disconnected(
    live_url, gateway, primary, secondary
):
    # 60 words 200 ms apart: a stream of about 12 s, unless the hang-up stops it.
    primary.set_fault(text=" ".join(f"word{i}" for i in range(60)), chunk_delay_ms=200)
    body = {"model": "auto", "messages": HELLO, "stream": True}
    first_text = ""
    async with (
        httpx.AsyncClient(timeout=30, headers=AUTH) as http,
        http.stream("POST", live_url + "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                first_text = json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                if first_text:
                    break
    hung_up = time.monotonic()
    assert first_text == "word0"
    record = await the_ledger_row(gateway, timeout=5)
    assert time.monotonic() - hung_up < 5  # long before the stream would have ended
    assert (record.outcome, record.reason, record.final_provider) == (
        "failed",
        "client_disconnected",
        "ollama-local",
    )
    # Nothing against the provider: it was the client that left.
    [attempt] = record.attempts
    assert (attempt["provider"], attempt["outcome"]) == ("ollama-local", "ok")
    assert secondary.calls == 0
