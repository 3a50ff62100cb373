"""Streamed answers, adapter by adapter, against the real fake provider over loopback: Ollama's
NDJSON, OpenAI's and Anthropic's server-sent events. The first text, the rest, the usage and the
finish reason; every failure before the first token classified for the router; failures after it
raised from `rest()`; and the pool's connection given back however the stream ended."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import httpx
import pytest

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from gateway.adapters import ADAPTERS, pool
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.pool import make_client
from gateway.adapters.stream import CompletionStream
from runtime.gateway import settings_for_clients
from tests.providers.test_adapters import MODELS, PROMPT, SYSTEM, provider_config, shop_question
from tests.providers.wire import Wire

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.backend_free]

PROMPT_WORDS = len(SYSTEM.split()) + len(PROMPT.split())
ANSWER_WORDS = len(DEFAULT_TEXT.split())
# Thirty words: paced at 50 ms a chunk, a stream that lasts well over a second.
LONG_TEXT = " ".join(f"word{i}" for i in range(30))
# Behaviour bounds, not benchmarks: a wait given 0.3 s must not hang on for seconds.
TIMEOUT_BOUND_S = 1.5


async def open_stream(
    adapter: ProviderAdapter,
    request: CompletionRequest | None = None,
    *,
    timeout: float = 5.0,
    first_token_timeout: float = 5.0,
) -> CompletionStream:
    return await adapter.stream(
        request or shop_question(), timeout=timeout, first_token_timeout=first_token_timeout
    )


async def the_rest(stream: CompletionStream) -> list[str]:
    return [piece async for piece in stream.rest()]


async def failure_before_the_first_token(
    adapter: ProviderAdapter, **timeouts: float
) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await open_stream(adapter, **timeouts)
    return caught.value


async def failure_after_the_first_token(stream: CompletionStream) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await the_rest(stream)
    return caught.value


@pytest.fixture(autouse=True, params=["native", "aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest, settings: Any) -> str:
    """Every streaming test runs on both connection pools the platform can use."""
    settings.PROVIDER_HTTP_CLIENT = request.param
    return request.param


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProvider]:
    with FakeProvider(models=list(MODELS.values())) as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


@pytest.fixture
def one_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients made from here on hold one connection: a stream that kept it would leave the
    next call waiting for the pool until its timeout."""
    monkeypatch.setattr(pool, "MAX_CONNECTIONS", 1)


@pytest.fixture
async def make_adapter() -> AsyncIterator[Callable[..., ProviderAdapter]]:
    """Adapters built as the router builds them; their clients are closed at the end."""
    made: list[ProviderAdapter] = []

    def make(kind: str, url: str, **overrides: Any) -> ProviderAdapter:
        config = provider_config(kind, url, **overrides)
        adapter = ADAPTERS[kind](config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


class StreamContract:
    """What every dialect's stream promises; each subclass below runs it on one dialect."""

    kind: ClassVar[str]
    stop_reason: ClassVar[str]
    length_reason: ClassVar[str]

    @pytest.fixture
    def adapter(self, fake: FakeProvider, make_adapter: Callable[..., ProviderAdapter]):
        return make_adapter(self.kind, fake.url)

    # A good answer ------------------------------------------------------------------------

    async def test_the_first_text_and_the_rest_make_the_whole_answer(self, adapter, fake):
        stream = await open_stream(adapter)

        assert stream.first
        assert DEFAULT_TEXT.startswith(stream.first)
        rest = await the_rest(stream)
        assert stream.first + "".join(rest) == DEFAULT_TEXT
        assert stream.text == DEFAULT_TEXT
        assert stream.done
        assert stream.provider == f"{self.kind}-test"
        assert fake.calls == 1

    async def test_the_usage_and_finish_reason_come_from_the_end_of_the_stream(self, adapter):
        stream = await open_stream(adapter)
        await the_rest(stream)

        assert stream.tokens_in == PROMPT_WORDS  # the system prompt was counted too
        assert stream.tokens_out == ANSWER_WORDS
        assert stream.finish_reason == self.stop_reason
        completion = stream.completion(12.0)
        assert (completion.text, completion.tokens_in, completion.tokens_out) == (
            DEFAULT_TEXT,
            PROMPT_WORDS,
            ANSWER_WORDS,
        )

    async def test_max_tokens_cuts_the_answer_with_the_length_reason(self, adapter):
        stream = await open_stream(adapter, shop_question(max_tokens=3))
        rest = await the_rest(stream)

        assert stream.first + "".join(rest) == " ".join(DEFAULT_TEXT.split()[:3])
        assert stream.tokens_out == 3
        assert stream.finish_reason == self.length_reason

    async def test_a_whole_stream_counts_one_call_and_one_success(self, adapter):
        stream = await open_stream(adapter)
        await the_rest(stream)

    # Failures before the first token: the router can still go elsewhere -------------------

    @pytest.mark.parametrize(
        ("fault", "status", "error_class"),
        [
            ({"mode": "error", "status": 500}, 500, ErrorClass.SERVER_ERROR),
            ({"mode": "error", "status": 503}, 503, ErrorClass.SERVER_ERROR),
            ({"mode": "rate_limit"}, 429, ErrorClass.RATE_LIMITED),
            ({"mode": "unauthorized"}, 401, ErrorClass.AUTH),
            ({"mode": "bad_request"}, 400, ErrorClass.CLIENT_ERROR),
        ],
        ids=["500", "503", "429", "401", "400"],
    )
    async def test_an_error_status_is_classified_before_the_first_token(
        self, adapter, fake, fault, status, error_class
    ):
        fake.set_fault(**fault)

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is error_class
        assert error.status == status

    async def test_a_429_keeps_its_retry_after(self, adapter, fake):
        fake.set_fault(mode="rate_limit", retry_after="7")

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.RATE_LIMITED
        assert error.retry_after_s == 7

    async def test_a_prompt_over_the_context_is_context_too_long(self, adapter, fake):
        fake.set_fault(mode="context_too_long")

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.CONTEXT_TOO_LONG

    async def test_a_stall_past_the_time_to_first_token_times_out_long_before_the_stall_ends(
        self, adapter, fake
    ):
        fake.set_fault(mode="stall", delay_ms=2000)

        started = time.monotonic()
        error = await failure_before_the_first_token(adapter, first_token_timeout=0.3)
        elapsed = time.monotonic() - started

        assert error.error_class is ErrorClass.TIMEOUT
        assert elapsed < TIMEOUT_BOUND_S

    async def test_a_stall_within_the_time_to_first_token_is_still_an_answer(self, adapter, fake):
        fake.set_fault(mode="stall", delay_ms=200)

        stream = await open_stream(adapter, first_token_timeout=3)
        rest = await the_rest(stream)

        assert stream.first + "".join(rest) == DEFAULT_TEXT

    async def test_a_provider_slower_than_the_time_to_first_token_times_out(self, adapter, fake):
        fake.set_fault(mode="slow", delay_ms=2000)  # not even the headers come

        started = time.monotonic()
        error = await failure_before_the_first_token(adapter, first_token_timeout=0.3)

        assert error.error_class is ErrorClass.TIMEOUT
        assert time.monotonic() - started < TIMEOUT_BOUND_S

    async def test_a_broken_first_event_is_malformed_before_the_first_token(self, adapter, fake):
        fake.set_fault(mode="malformed")

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.MALFORMED

    async def test_a_stopped_provider_is_refused(self, make_adapter, closed_port):
        adapter = make_adapter(self.kind, f"http://127.0.0.1:{closed_port}")

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.REFUSED

    # Failures after the first token: raised from rest() ------------------------------------

    async def test_a_long_answer_that_keeps_coming_is_not_cut_by_the_timeout(self, adapter, fake):
        fake.set_fault(text=LONG_TEXT, chunk_delay_ms=50)  # 30 pieces: 1.5 s and more

        stream = await open_stream(adapter, timeout=0.6, first_token_timeout=0.6)
        rest = [piece async for piece in stream.rest()]

        assert stream.first + "".join(rest) == LONG_TEXT  # longer than 0.6 s, never 0.6 s idle

    # The connection goes back to the pool however the stream ended --------------------------

    async def test_after_a_stream_is_closed_midway_the_next_call_works(
        self, one_connection, adapter, fake
    ):
        # Three seconds of stream: aiohttp hands a connection back by itself once its answer
        # has arrived whole, so a shorter one could hide a stream that was never closed.
        fake.set_fault(text=LONG_TEXT, chunk_delay_ms=100)
        stream = await open_stream(adapter)
        await stream.aclose()  # the client went away after the first token
        fake.set_fault(text=DEFAULT_TEXT, chunk_delay_ms=0)

        completion = await adapter.complete(shop_question(), timeout=2)
        assert completion.text == DEFAULT_TEXT
        stream = await open_stream(adapter, timeout=2)
        assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT

    async def test_after_a_timeout_before_the_first_token_the_next_call_works(
        self, one_connection, adapter, fake
    ):
        fake.set_fault(mode="stall", delay_ms=5000)  # longer than the next call's timeout
        await failure_before_the_first_token(adapter, first_token_timeout=0.3)
        fake.set_fault(mode="ok")

        stream = await open_stream(adapter, timeout=2)
        assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT

    async def test_after_an_error_status_the_next_call_works(self, one_connection, adapter, fake):
        fake.set_fault(mode="error", status=503)
        await failure_before_the_first_token(adapter)
        fake.set_fault(mode="ok")

        stream = await open_stream(adapter, timeout=2)
        assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT

    async def test_whole_streams_one_after_another_share_one_connection(
        self, one_connection, adapter
    ):
        for _ in range(5):
            stream = await open_stream(adapter, timeout=2)
            assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT


class PauseAfterTheFirstToken:
    """Dialects whose first text is the fake's first chunk (Anthropic's comes after three
    paced events: its pause is before the first token, below)."""

    async def test_a_pause_mid_answer_longer_than_the_timeout_times_out_in_the_rest(
        self, adapter, fake
    ):
        fake.set_fault(text=LONG_TEXT, chunk_delay_ms=800)  # each piece 0.8 s after the last

        stream = await open_stream(adapter, timeout=0.5, first_token_timeout=5.0)
        assert stream.first
        started = time.monotonic()
        error = await failure_after_the_first_token(stream)
        elapsed = time.monotonic() - started

        assert error.error_class is ErrorClass.TIMEOUT
        assert 0.4 < elapsed < TIMEOUT_BOUND_S
        assert LONG_TEXT.startswith(stream.text) and stream.text != LONG_TEXT


class CutAfterTheFirstToken:
    """Dialects whose first chunk already carries text: a cut comes after the first token."""

    kind: ClassVar[str]

    async def test_a_cut_after_the_first_token_raises_refused_from_the_rest(self, adapter, fake):
        fake.set_fault(mode="cut_stream", delay_ms=200)

        stream = await open_stream(adapter)
        assert stream.first == DEFAULT_TEXT.split()[0]
        error = await failure_after_the_first_token(stream)

        assert error.error_class is ErrorClass.REFUSED
        assert stream.text == stream.first  # what arrived is kept for the ledger

    async def test_after_a_cut_the_next_call_on_the_same_adapter_works(
        self, one_connection, adapter, fake
    ):
        fake.set_fault(mode="cut_stream", delay_ms=100)
        stream = await open_stream(adapter)
        await failure_after_the_first_token(stream)
        fake.set_fault(mode="ok")

        completion = await adapter.complete(shop_question(), timeout=2)
        assert completion.text == DEFAULT_TEXT
        stream = await open_stream(adapter, timeout=2)
        assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT


class TestOllamaStream(StreamContract, CutAfterTheFirstToken, PauseAfterTheFirstToken):
    kind = "ollama"
    stop_reason = "stop"
    length_reason = "length"

    async def test_it_asks_for_a_stream_of_json_lines_with_num_predict(self, adapter):
        wire = Wire(adapter)

        stream = await open_stream(adapter, shop_question(max_tokens=3, temperature=0.2))
        await the_rest(stream)

        assert wire.sent[0]["stream"] is True
        assert wire.sent[0]["options"] == {"num_ctx": 8192, "num_predict": 3, "temperature": 0.2}
        assert wire.sent[0]["messages"][0] == {"role": "system", "content": SYSTEM}


class TestOpenAIStream(StreamContract, CutAfterTheFirstToken, PauseAfterTheFirstToken):
    kind = "openai"
    stop_reason = "stop"
    length_reason = "length"

    async def test_it_asks_for_a_stream_with_the_usage_at_its_end(self, adapter):
        wire = Wire(adapter)

        stream = await open_stream(adapter, shop_question(max_tokens=3))
        await the_rest(stream)

        assert wire.sent[0]["stream"] is True
        assert wire.sent[0]["stream_options"] == {"include_usage": True}
        assert wire.sent[0]["max_tokens"] == 3


class TestAnthropicStream(StreamContract):
    kind = "anthropic"
    stop_reason = "end_turn"
    length_reason = "max_tokens"

    async def test_it_asks_for_a_stream_with_the_system_prompt_on_top(self, adapter):
        wire = Wire(adapter)

        stream = await open_stream(adapter, shop_question(max_tokens=3))
        await the_rest(stream)

        assert wire.sent[0]["stream"] is True
        assert wire.sent[0]["system"] == SYSTEM
        assert wire.sent[0]["max_tokens"] == 3
        assert wire.sent[0]["messages"] == [{"role": "user", "content": PROMPT}]

    async def test_a_529_overloaded_is_rate_limited_before_the_first_token(self, adapter, fake):
        fake.set_fault(mode="overloaded")

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.RATE_LIMITED
        assert error.status == 529

    async def test_a_cut_before_any_text_is_refused_before_the_first_token(self, adapter, fake):
        # The first event is message_start, which carries no text: the cut after it comes
        # before the first token, so the router may still go to another provider.
        fake.set_fault(mode="cut_stream", delay_ms=100)

        error = await failure_before_the_first_token(adapter)

        assert error.error_class is ErrorClass.REFUSED

    async def test_a_pause_longer_than_the_timeout_before_any_text_times_out(self, adapter, fake):
        fake.set_fault(chunk_delay_ms=800)  # message_start, then 0.8 s before each event

        started = time.monotonic()
        with pytest.raises(ProviderError) as error:
            await open_stream(adapter, timeout=0.5, first_token_timeout=5.0)

        assert error.value.error_class is ErrorClass.TIMEOUT
        assert time.monotonic() - started < TIMEOUT_BOUND_S

    async def test_after_a_cut_the_next_call_on_the_same_adapter_works(
        self, one_connection, adapter, fake
    ):
        fake.set_fault(mode="cut_stream", delay_ms=100)
        await failure_before_the_first_token(adapter)
        fake.set_fault(mode="ok")

        completion = await adapter.complete(shop_question(), timeout=2)
        assert completion.text == DEFAULT_TEXT
        stream = await open_stream(adapter, timeout=2)
        assert stream.first + "".join(await the_rest(stream)) == DEFAULT_TEXT


class TestErrorEvents:
    """An error reported inside a 200 stream, one decoded event at a time (the fake provider
    sends none): the same classes the error's HTTP status would get."""

    @pytest.fixture
    def stream_of(self) -> Callable[[str], tuple[ProviderAdapter, CompletionStream]]:
        def make(kind: str) -> tuple[ProviderAdapter, CompletionStream]:
            config = provider_config(kind, "http://127.0.0.1:1")
            adapter = ADAPTERS[kind](config, httpx.AsyncClient())
            return adapter, adapter.stream_over(shop_question(), httpx.Response(200), 0.0, 0.0)

        return make

    @pytest.mark.parametrize(
        ("kind", "event", "error_class"),
        [
            ("ollama", {"error": "model runner has unexpectedly stopped"}, ErrorClass.SERVER_ERROR),
            (
                "openai",
                {"error": {"message": "The server had an error", "type": "server_error"}},
                ErrorClass.SERVER_ERROR,
            ),
            (
                "anthropic",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                ErrorClass.RATE_LIMITED,
            ),
            (
                "anthropic",
                {"type": "error", "error": {"type": "authentication_error", "message": "key"}},
                ErrorClass.AUTH,
            ),
            (
                "anthropic",
                {"type": "error", "error": {"type": "api_error", "message": "Internal"}},
                ErrorClass.SERVER_ERROR,
            ),
        ],
        ids=["ollama", "openai", "anthropic-overloaded", "anthropic-auth", "anthropic-api"],
    )
    def test_an_error_event_raises_its_class(self, stream_of, kind, event, error_class):
        adapter, stream = stream_of(kind)

        with pytest.raises(ProviderError) as caught:
            stream.decoder.decode(event, stream)

        assert caught.value.error_class is error_class
