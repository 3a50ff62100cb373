"""A provider's key in its own successful answer never reaches a client, the answer cache or the
ledger, on every door: a whole answer that quotes it fails over to the next provider, as a
garbage answer does (`secret_in_answer`); a stream that quotes it, split across its events or
not, fails over while nothing is sent yet, or else ends with the door's error event, the key's
first characters held back.

The leaky provider is a fake that answers with the very key the gateway sends it (its
`FAILOVER_SECRET_…` variable), cut into five-character pieces: a stream carries the key in
several events."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from asgiref.sync import sync_to_async

from billing.models import CallRecord
from devtools.fake_provider import FakeProvider
from gateway.engine.breaker import Mode
from providers.models import Provider
from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

CANARY_ENV = "FAILOVER_SECRET_ANSWER_CANARY"
LEAKY = "leaky-cloud"
MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}
PRIMARY_TEXT = "Hello from the local model."
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def canary(monkeypatch) -> str:
    key = f"sk-canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(CANARY_ENV, key)
    return key


@pytest.fixture(params=["openai"])
def kind(request) -> str:
    return request.param


@pytest.fixture
async def leaky(canary, kind, gateway) -> AsyncIterator[FakeProvider]:
    """A provider ahead of the primary whose answers quote its own key (set `text`)."""
    model = MODELS[kind]
    with FakeProvider(models=[model], api_key=canary, piece_chars=5) as fake:
        provider = Provider(
            name=LEAKY,
            kind=kind,
            base_url=fake.url,
            model=model,
            api_key_env=CANARY_ENV,
            priority=5,
            timeout_s=5,
        )
        await sync_to_async(provider.full_clean)()
        await sync_to_async(provider.save)()
        await gateway.snapshots.refresh()
        # Every request reaches it: its failures would otherwise open its breaker.
        await gateway.store.set_mode(LEAKY, Mode.FORCED_CLOSED)
        yield fake


def at_start(key: str) -> str:
    return f"{key} is the key you asked for."


def midway(key: str) -> str:
    return f"Here is the key you asked for: {key}, keep it safe."


def leaks(text: str, key: str) -> list[str]:
    """Which of the key's shapes `text` holds: whole, or either half."""
    half = len(key) // 2
    forms = {"whole": key, "first half": key[:half], "last half": key[half:]}
    return [shape for shape, form in forms.items() if form in text]


async def ledger_text(gateway, rows: int) -> str:
    await ledger_rows(gateway, at_least=rows)
    return json.dumps(await sync_to_async(lambda: list(CallRecord.objects.values()))(), default=str)


async def assert_failed_over(gateway, key: str, rows: int = 1) -> None:
    """The last request's leaky attempt failed as `secret_in_answer`, the primary answered, and
    the ledger holds no piece of the key."""
    record = (await ledger_rows(gateway, at_least=rows))[-1]
    assert [(a["provider"], a["outcome"], a.get("error_class")) for a in record.attempts] == [
        (LEAKY, "error", "secret_in_answer"),
        ("ollama-local", "ok", None),
    ]
    assert (record.outcome, record.final_provider) == ("ok", "ollama-local")
    assert leaks(await ledger_text(gateway, rows), key) == []


# The doors, through the SDKs the clients use --------------------------------------------------


def openai_sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def anthropic_sdk(live_url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=live_url, api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


async def whole(door: str, live_url: str) -> tuple[str, str]:
    """The answer's text and everything of it the client got, asked whole at `door`."""
    if door == "complete":
        async with httpx.AsyncClient(base_url=live_url, headers=AUTH, timeout=30) as http:
            response = await http.post("/api/v1/complete", json={"prompt": "Say hello."})
        return response.json()["text"], response.text
    if door == "messages":
        async with anthropic_sdk(live_url) as client:
            message = await client.messages.create(model="auto", max_tokens=200, messages=HELLO)
        return message.content[0].text, message.model_dump_json()
    async with openai_sdk(live_url) as client:
        if door == "chat":
            chat = await client.chat.completions.create(model="auto", messages=HELLO)
            return chat.choices[0].message.content or "", chat.model_dump_json()
        response = await client.responses.create(model="auto", input="Say hello.")
        return response.output_text, response.model_dump_json()


async def streamed(door: str, live_url: str) -> tuple[str, str]:
    """The streamed answer's text and every event the client got, asked at `door`."""
    if door == "messages":
        async with (
            anthropic_sdk(live_url) as client,
            client.messages.stream(model="auto", max_tokens=200, messages=HELLO) as stream,
        ):
            events = [event async for event in stream]
            text = (await stream.get_final_message()).content[0].text
        return text, json.dumps([event.model_dump(mode="json") for event in events])
    async with openai_sdk(live_url) as client:
        if door == "chat":
            chunks = await client.chat.completions.create(model="auto", messages=HELLO, stream=True)
            received = [chunk async for chunk in chunks]
            text = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
        else:
            stream = await client.responses.create(model="auto", input="Say hello.", stream=True)
            received = [event async for event in stream]
            deltas = [e for e in received if e.type == "response.output_text.delta"]
            text = "".join(event.delta for event in deltas)
    return text, json.dumps([item.model_dump(mode="json") for item in received])


async def raw_stream(door: str, live_url: str) -> str:
    """Every byte of a streamed answer at `door`, as sent."""
    body: dict[str, Any] = {"model": "auto", "stream": True}
    if door == "responses":
        body["input"] = "Say hello."
    else:
        body["messages"] = HELLO
    if door == "messages":
        body["max_tokens"] = 200
    path = {
        "chat": "/v1/chat/completions",
        "messages": "/v1/messages",
        "responses": "/v1/responses",
    }
    async with (
        httpx.AsyncClient(headers=AUTH, timeout=30) as http,
        http.stream("POST", live_url + path[door], json=body) as response,
    ):
        assert response.status_code == 200
        return (await response.aread()).decode()


def text_of(sent: str) -> str:
    """The answer's text in a stream's events, at any of the three doors."""
    text = []
    for line in sent.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "choices" in data and data["choices"]:
            text.append(data["choices"][0]["delta"].get("content") or "")
        elif data.get("type") == "response.output_text.delta":
            text.append(data["delta"])
        elif data.get("type") == "content_block_delta":
            text.append(data["delta"].get("text", ""))
    return "".join(text)


# Whole answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("door", ["complete", "chat", "messages", "responses"])
async def test_a_whole_answer_that_quotes_the_key_fails_over_to_the_next_provider(
    door, live_url, gateway, leaky, canary, primary
):
    leaky.set_fault(text=midway(canary))

    text, received = await whole(door, live_url)

    assert text == PRIMARY_TEXT
    assert leaks(received, canary) == []
    await assert_failed_over(gateway, canary)


@pytest.mark.parametrize("kind", ["openai", "anthropic"], indirect=True)
async def test_a_key_in_a_tool_calls_arguments_fails_over_too(live_url, gateway, leaky, canary):
    leaky.set_fault(tool_arguments={"city": "Paris", "token": canary})
    tool = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    async with openai_sdk(live_url) as client:
        chat = await client.chat.completions.create(model="auto", messages=HELLO, tools=[tool])
    assert leaks(chat.model_dump_json(), canary) == []
    await assert_failed_over(gateway, canary)


# Streams ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"], indirect=True)
@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
async def test_a_stream_that_opens_with_the_key_fails_over_before_anything_is_sent(
    door, live_url, gateway, leaky, canary, primary
):
    leaky.set_fault(text=at_start(canary))

    text, received = await streamed(door, live_url)

    assert text == PRIMARY_TEXT
    assert leaks(received, canary) == []
    await assert_failed_over(gateway, canary)


@pytest.mark.parametrize("kind", ["openai", "anthropic"], indirect=True)
@pytest.mark.parametrize(
    ("door", "error"),
    [
        ("chat", '"code":"stream_interrupted"'),
        ("messages", "event:error"),
        ("responses", '"code":"stream_interrupted"'),
    ],
)
async def test_a_stream_that_quotes_the_key_midway_ends_with_the_doors_error_event(
    door, error, live_url, gateway, leaky, canary, primary
):
    leaky.set_fault(text=midway(canary))

    sent = await raw_stream(door, live_url)

    assert leaks(sent, canary) == [] and canary[:6] not in sent
    text = text_of(sent)
    assert text and midway(canary).startswith(text)
    assert len(text) <= midway(canary).index(canary)  # none of the key, held back or not
    assert error in sent.replace(" ", "")
    assert primary.calls == 0  # nothing of another provider spliced in
    [record] = await ledger_rows(gateway, at_least=1)
    assert (record.outcome, record.reason, record.final_provider) == (
        "failed",
        "stream_interrupted",
        LEAKY,
    )
    [attempt] = record.attempts
    assert (attempt["outcome"], attempt["error_class"]) == ("error", "secret_in_answer")
    assert attempt["detail"].startswith("after the first token")
    assert leaks(await ledger_text(gateway, 1), canary) == []


# Nothing of it is cached ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_answer_that_quotes_the_key_is_never_cached_to_stand_in_later(
    stream, live_url, gateway, leaky, canary, primary, secondary
):
    primary.stop()
    secondary.stop()
    leaky.set_fault(text=midway(canary))
    if stream:
        assert leaks(await raw_stream("chat", live_url), canary) == []
    else:
        text, received = await whole("chat", live_url)
        assert leaks(received, canary) == [] and text.startswith("Sorry")
    leaky.stop()

    text, received = await whole("chat", live_url)

    assert text.startswith("Sorry, our assistant is temporarily unavailable")
    assert leaks(received, canary) == []
    records = await ledger_rows(gateway, at_least=2)
    assert [r.cache_hit for r in records] == [False, False]
    assert leaks(await ledger_text(gateway, 2), canary) == []
