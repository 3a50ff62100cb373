"""The fake provider, over real loopback sockets: its three dialects, every fault, the control
API, the in-process handle and the management command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from devtools.fake_provider import DEFAULT_TEXT, ConfigError, FakeProvider

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = [pytest.mark.slow, pytest.mark.backend_free]

ROOT = Path(__file__).resolve().parents[2]
PROMPT = [
    {"role": "system", "content": "You answer shop questions."},
    {"role": "user", "content": "Where is my order?"},
]
PROMPT_WORDS = 8
ANSWER_WORDS = len(DEFAULT_TEXT.split())
OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def server():
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def fake(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def client(fake):
    with httpx.Client(base_url=fake.url, timeout=5) as client:
        yield client


def ollama_chat(client, **fields):
    body = {"model": "llama3.1:8b", "messages": PROMPT, "stream": False, **fields}
    return client.post("/api/chat", json=body)


def openai_chat(client, **fields):
    body = {"model": "gpt-4o-mini", "messages": PROMPT, **fields}
    return client.post("/v1/chat/completions", json=body)


def anthropic_chat(client, **fields):
    body = {"model": "gpt-4o-mini", "max_tokens": 1024, "messages": PROMPT, **fields}
    return client.post("/v1/messages", json=body)


# dialect -> (path, body) of a streamed chat call
STREAMED = {
    "ollama": ("/api/chat", {"model": "llama3.1:8b", "messages": PROMPT}),
    "openai": (
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": PROMPT, "stream": True},
    ),
    "anthropic": (
        "/v1/messages",
        {"model": "gpt-4o-mini", "max_tokens": 1024, "messages": PROMPT, "stream": True},
    ),
}


def sse_events(text):
    return [line.removeprefix("data: ") for line in text.split("\n\n") if line]


def anthropic_events(text):
    """Anthropic's server-sent events as (name, data) pairs; each event's data names its type."""
    events = []
    for block in filter(None, text.split("\n\n")):
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    return events


def stream_chunks(dialect, text):
    """A streamed body split into the chunks the server sent: NDJSON lines or SSE events."""
    separator = "\n" if dialect == "ollama" else "\n\n"
    return [chunk for chunk in text.split(separator) if chunk]


class TestOllamaDialect:
    def test_it_answers_ollama_chat_in_ollamas_shape(self, client):
        response = ollama_chat(client)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert set(body) == {
            "model",
            "created_at",
            "message",
            "done",
            "done_reason",
            "total_duration",
            "load_duration",
            "prompt_eval_count",
            "prompt_eval_duration",
            "eval_count",
            "eval_duration",
        }
        assert body["model"] == "llama3.1:8b"
        assert body["message"] == {"role": "assistant", "content": DEFAULT_TEXT}
        assert (body["done"], body["done_reason"]) == (True, "stop")
        assert datetime.fromisoformat(body["created_at"]).tzinfo is not None
        durations = [body[key] for key in body if key.endswith("_duration")]
        assert all(isinstance(value, int) and value >= 0 for value in durations)

    def test_it_counts_prompt_and_answer_words_as_tokens(self, client):
        body = ollama_chat(client).json()
        assert (body["prompt_eval_count"], body["eval_count"]) == (PROMPT_WORDS, ANSWER_WORDS)

    def test_ollama_chat_streams_ndjson_when_stream_is_absent(self, client):
        body = {"model": "llama3.1:8b", "messages": PROMPT}
        response = client.post("/api/chat", json=body)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.text.splitlines()]
        *pieces, final = lines
        assert len(pieces) == ANSWER_WORDS
        assert all(piece["done"] is False for piece in pieces)
        assert "".join(piece["message"]["content"] for piece in pieces) == DEFAULT_TEXT
        assert final["done"] is True and final["done_reason"] == "stop"
        assert (final["prompt_eval_count"], final["eval_count"]) == (PROMPT_WORDS, ANSWER_WORDS)

    def test_num_predict_cuts_the_answer_to_that_many_words(self, client):
        body = ollama_chat(client, options={"num_predict": 3, "temperature": 0.2}).json()
        assert body["message"]["content"] == " ".join(DEFAULT_TEXT.split()[:3])
        assert (body["eval_count"], body["done_reason"]) == (3, "length")

    def test_it_lists_the_served_models_as_tags(self, client):
        models = client.get("/api/tags").json()["models"]
        assert [model["name"] for model in models] == ["llama3.1:8b", "gpt-4o-mini"]
        llama = models[0]
        assert llama["model"] == "llama3.1:8b"
        assert {"modified_at", "size", "digest", "details"} <= set(llama)
        assert llama["details"]["parameter_size"] == "8.0B"

    def test_an_unknown_model_is_a_404_in_ollamas_words(self, client):
        response = ollama_chat(client, model="mistral:7b")
        assert response.status_code == 404
        assert response.json() == {"error": 'model "mistral:7b" not found, try pulling it first'}


class TestOpenAIDialect:
    def test_it_answers_chat_completions_in_openais_shape(self, client):
        response = openai_chat(client, temperature=0.1)
        assert response.status_code == 200
        body = response.json()
        assert body["id"].startswith("chatcmpl-")
        assert body["object"] == "chat.completion"
        assert isinstance(body["created"], int)
        assert body["model"] == "gpt-4o-mini"
        [choice] = body["choices"]
        assert choice["index"] == 0 and choice["finish_reason"] == "stop"
        assert choice["message"]["role"] == "assistant"
        assert choice["message"]["content"] == DEFAULT_TEXT
        assert body["usage"] == {
            "prompt_tokens": PROMPT_WORDS,
            "completion_tokens": ANSWER_WORDS,
            "total_tokens": PROMPT_WORDS + ANSWER_WORDS,
        }

    def test_it_streams_chunks_as_server_sent_events_ending_in_done(self, client):
        response = openai_chat(client, stream=True)
        assert response.headers["content-type"].startswith("text/event-stream")
        *events, done = sse_events(response.text)
        assert done == "[DONE]"
        chunks = [json.loads(event) for event in events]
        assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
        assert text == DEFAULT_TEXT
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert all("usage" not in chunk for chunk in chunks)

    def test_include_usage_adds_a_usage_chunk_before_done(self, client):
        response = openai_chat(client, stream=True, stream_options={"include_usage": True})
        *events, done = sse_events(response.text)
        usage_chunk = json.loads(events[-1])
        assert usage_chunk["choices"] == []
        assert usage_chunk["usage"]["completion_tokens"] == ANSWER_WORDS
        assert usage_chunk["usage"]["prompt_tokens"] == PROMPT_WORDS
        assert done == "[DONE]"

    @pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
    def test_max_tokens_cuts_the_answer_to_that_many_words(self, client, field):
        body = openai_chat(client, **{field: 2}).json()
        assert body["choices"][0]["message"]["content"] == " ".join(DEFAULT_TEXT.split()[:2])
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 2

    def test_it_lists_the_served_models(self, client):
        body = client.get("/v1/models").json()
        assert body["object"] == "list"
        assert body["data"][0] == {
            "id": "llama3.1:8b",
            "object": "model",
            "created": body["data"][0]["created"],
            "owned_by": "fake-provider",
        }
        assert [model["id"] for model in body["data"]] == ["llama3.1:8b", "gpt-4o-mini"]

    def test_an_unknown_model_is_a_404_model_not_found(self, client):
        response = openai_chat(client, model="gpt-5")
        assert response.status_code == 404
        error = response.json()["error"]
        assert set(error) == OPENAI_ERROR_KEYS
        assert (error["type"], error["code"]) == ("invalid_request_error", "model_not_found")

    def test_an_api_key_guards_every_endpoint_in_its_own_dialect(self, fake, client):
        fake.set_fault(api_key="sk-right")
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            for response in (
                client.post(
                    "/v1/chat/completions",
                    json={"model": "gpt-4o-mini", "messages": PROMPT},
                    headers=headers,
                ),
                client.get("/v1/models", headers=headers),
            ):
                assert response.status_code == 401
                assert response.json()["error"] == {
                    "message": response.json()["error"]["message"],
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
        right = {"Authorization": "Bearer sk-right"}
        assert client.get("/v1/models", headers=right).status_code == 200
        # Ollama behind an auth proxy, or Ollama's cloud API, takes a bearer key too.
        refused = ollama_chat(client)
        assert refused.status_code == 401 and refused.json() == {"error": "unauthorized"}
        assert client.get("/api/tags", headers=right).status_code == 200

    @pytest.mark.parametrize("chat", [ollama_chat, openai_chat])
    def test_a_body_that_is_not_json_is_a_400(self, client, chat):
        path = "/api/chat" if chat is ollama_chat else "/v1/chat/completions"
        response = client.post(path, content=b"{not json")
        assert response.status_code == 400


class TestAnthropicDialect:
    def test_it_answers_messages_in_anthropics_shape(self, client):
        response = anthropic_chat(client)
        assert response.status_code == 200
        body = response.json()
        assert body["id"].startswith("msg_")
        assert (body["type"], body["role"], body["model"]) == (
            "message",
            "assistant",
            "gpt-4o-mini",
        )
        assert body["content"] == [{"type": "text", "text": DEFAULT_TEXT}]
        assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)
        assert body["usage"] == {"input_tokens": PROMPT_WORDS, "output_tokens": ANSWER_WORDS}

    def test_it_streams_messages_as_anthropics_server_sent_events(self, client):
        response = anthropic_chat(client, stream=True)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = anthropic_events(response.text)
        names = [name for name, _ in events]
        assert names == [
            "message_start",
            "content_block_start",
            "ping",
            *["content_block_delta"] * ANSWER_WORDS,
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        message = events[0][1]["message"]
        assert message["id"].startswith("msg_")
        assert (message["type"], message["role"], message["model"]) == (
            "message",
            "assistant",
            "gpt-4o-mini",
        )
        assert message["content"] == []
        assert (message["stop_reason"], message["stop_sequence"]) == (None, None)
        assert message["usage"] == {"input_tokens": PROMPT_WORDS, "output_tokens": 1}
        assert events[1][1] == {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        deltas = [data for name, data in events if name == "content_block_delta"]
        assert all(delta["index"] == 0 for delta in deltas)
        assert all(delta["delta"]["type"] == "text_delta" for delta in deltas)
        assert "".join(delta["delta"]["text"] for delta in deltas) == DEFAULT_TEXT
        assert events[-3][1] == {"type": "content_block_stop", "index": 0}
        assert events[-2][1] == {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": ANSWER_WORDS},
        }
        assert events[-1][1] == {"type": "message_stop"}

    def test_max_tokens_cuts_the_stream_with_stop_reason_max_tokens(self, client):
        events = anthropic_events(anthropic_chat(client, stream=True, max_tokens=3).text)
        deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
        assert "".join(deltas) == " ".join(DEFAULT_TEXT.split()[:3])
        message_delta = next(data for name, data in events if name == "message_delta")
        assert message_delta["delta"]["stop_reason"] == "max_tokens"
        assert message_delta["usage"] == {"output_tokens": 3}

    @pytest.mark.parametrize(
        ("fault", "status", "error_type"),
        [
            ({"mode": "rate_limit"}, 429, "rate_limit_error"),
            ({"mode": "overloaded"}, 529, "overloaded_error"),
            ({"mode": "error", "status": 502}, 502, "api_error"),
        ],
    )
    def test_errors_on_a_streamed_call_are_plain_json_replies(
        self, fake, client, fault, status, error_type
    ):
        fake.set_fault(**fault)
        response = anthropic_chat(client, stream=True)
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert (body["type"], body["error"]["type"]) == ("error", error_type)
        assert body["error"]["message"]

    def test_an_unknown_model_on_a_streamed_call_is_a_json_404(self, client):
        response = anthropic_chat(client, stream=True, model="claude-9")
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


class TestFaults:
    @pytest.mark.parametrize(
        ("fault", "status", "openai_type", "openai_code"),
        [
            ({"mode": "error"}, 500, "server_error", None),
            ({"mode": "error", "status": 503}, 503, "server_error", None),
            ({"mode": "unauthorized"}, 401, "invalid_request_error", "invalid_api_key"),
            ({"mode": "bad_request"}, 400, "invalid_request_error", None),
            ({"mode": "rate_limit"}, 429, "requests", "rate_limit_exceeded"),
        ],
    )
    def test_error_modes_answer_their_status_in_each_dialects_shape(
        self, fake, client, fault, status, openai_type, openai_code
    ):
        fake.set_fault(**fault)
        openai = openai_chat(client)
        assert openai.status_code == status
        error = openai.json()["error"]
        assert set(error) == OPENAI_ERROR_KEYS and error["message"]
        assert (error["type"], error["code"]) == (openai_type, openai_code)
        ollama = ollama_chat(client)
        assert ollama.status_code == status
        assert isinstance(ollama.json()["error"], str) and ollama.json()["error"]

    @pytest.mark.parametrize("retry_after", ["2", "Wed, 21 Oct 2015 07:28:00 GMT"])
    def test_rate_limit_sends_retry_after_verbatim(self, fake, client, retry_after):
        fake.set_fault(mode="rate_limit", retry_after=retry_after)
        assert openai_chat(client).headers["retry-after"] == retry_after
        assert ollama_chat(client).headers["retry-after"] == retry_after

    def test_rate_limit_without_retry_after_sends_no_header(self, fake, client):
        fake.set_fault(mode="rate_limit")
        response = openai_chat(client)
        assert response.status_code == 429
        assert "retry-after" not in response.headers

    def test_context_too_long_is_a_400_in_each_dialects_words(self, fake, client):
        fake.set_fault(mode="context_too_long")
        openai = openai_chat(client)
        assert openai.status_code == 400
        error = openai.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("This model's maximum context length is 8192 tokens")
        ollama = ollama_chat(client)
        assert ollama.status_code == 400
        assert ollama.json() == {"error": "input length exceeds the context length"}

    @pytest.mark.parametrize("chat", [ollama_chat, openai_chat])
    def test_malformed_answers_200_with_a_body_that_is_not_json(self, fake, client, chat):
        fake.set_fault(mode="malformed")
        response = chat(client)
        assert response.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            response.json()

    def test_malformed_streams_carry_a_broken_line(self, fake, client):
        fake.set_fault(mode="malformed")
        ollama_lines = ollama_chat(client, stream=True).text.splitlines()
        with pytest.raises(json.JSONDecodeError):
            [json.loads(line) for line in ollama_lines]
        events = sse_events(openai_chat(client, stream=True).text)
        with pytest.raises(json.JSONDecodeError):
            [json.loads(event) for event in events if event != "[DONE]"]

    def test_malformed_anthropic_streams_break_the_first_event_only(self, fake, client):
        fake.set_fault(mode="malformed")
        response = anthropic_chat(client, stream=True)
        assert response.status_code == 200
        first, *rest = response.text.split("\n\n")
        assert first.startswith("event: message_start\ndata: {")
        with pytest.raises(json.JSONDecodeError):
            json.loads(first.split("\ndata: ", 1)[1])
        assert [name for name, _ in anthropic_events("\n\n".join(rest))][-1] == "message_stop"

    @pytest.mark.parametrize("chat", [ollama_chat, openai_chat])
    def test_cut_stream_sends_the_first_chunk_then_drops_the_connection(self, fake, client, chat):
        fake.set_fault(mode="cut_stream")
        path = "/api/chat" if chat is ollama_chat else "/v1/chat/completions"
        model = "llama3.1:8b" if chat is ollama_chat else "gpt-4o-mini"
        received = []
        body = {"model": model, "messages": PROMPT, "stream": True}
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", path, json=body) as response,
        ):
            assert response.status_code == 200
            received.extend(line for line in response.iter_lines() if line)
        assert len(received) == 1
        first = json.loads(received[0].removeprefix("data: "))
        assert "[DONE]" not in received[0] and first.get("done") is not True

    def test_cut_stream_on_an_anthropic_stream_sends_message_start_then_drops(self, fake, client):
        fake.set_fault(mode="cut_stream")
        path, body = STREAMED["anthropic"]
        received = []
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", path, json=body) as response,
        ):
            assert response.status_code == 200
            received.extend(response.iter_text())
        [(name, data)] = anthropic_events("".join(received))
        assert name == "message_start"
        assert data["message"]["role"] == "assistant"

    def test_cut_stream_waits_delay_ms_before_the_cut(self, fake, client):
        fake.set_fault(mode="cut_stream", delay_ms=200)
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError):
            openai_chat(client, stream=True)
        assert time.monotonic() - started >= 0.2

    def test_cut_stream_on_a_whole_answer_cuts_its_body_short(self, fake, client):
        fake.set_fault(mode="cut_stream")
        with pytest.raises(httpx.RemoteProtocolError):
            openai_chat(client)

    def test_slow_answers_after_delay_ms(self, fake, client):
        fake.set_fault(mode="slow", delay_ms=300)
        started = time.monotonic()
        response = openai_chat(client)
        assert time.monotonic() - started >= 0.3
        assert response.json()["choices"][0]["message"]["content"] == DEFAULT_TEXT

    @pytest.mark.parametrize("dialect", STREAMED)
    def test_stall_sends_the_headers_at_once_and_the_first_chunk_after_delay_ms(
        self, fake, client, dialect
    ):
        fake.set_fault(mode="stall", delay_ms=1000)
        path, body = STREAMED[dialect]
        started = time.monotonic()
        with client.stream("POST", path, json=body) as response:
            headers_at = time.monotonic() - started
            chunks = response.iter_text()
            first = next(chunks)
            first_at = time.monotonic() - started
            text = first + "".join(chunks)
        assert response.status_code == 200
        # Generous margins: the headers come well before the stall ends, the first chunk after.
        assert headers_at < 0.5
        assert first_at >= 1.0
        if dialect == "anthropic":
            assert [name for name, _ in anthropic_events(text)][-1] == "message_stop"
        else:
            assert len(stream_chunks(dialect, text)) > ANSWER_WORDS

    def test_stall_on_a_whole_answer_waits_delay_ms_like_slow(self, fake, client):
        fake.set_fault(mode="stall", delay_ms=300)
        started = time.monotonic()
        response = anthropic_chat(client)
        assert time.monotonic() - started >= 0.3
        assert response.json()["content"][0]["text"] == DEFAULT_TEXT

    def test_a_stall_longer_than_the_read_timeout_times_out_after_the_headers(self, fake, client):
        fake.set_fault(mode="stall", delay_ms=5000)
        path, body = STREAMED["openai"]
        started = time.monotonic()
        with client.stream("POST", path, json=body, timeout=0.3) as response:
            assert response.status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                next(response.iter_raw())
        assert time.monotonic() - started < 2
        fake.set_fault(mode="ok")
        assert openai_chat(client).status_code == 200

    @pytest.mark.parametrize("dialect", STREAMED)
    def test_chunk_delay_ms_spaces_the_chunks_of_a_stream(self, fake, client, dialect):
        fake.set_fault(text="one two three four", chunk_delay_ms=60)
        path, body = STREAMED[dialect]
        started = time.monotonic()
        with client.stream("POST", path, json=body) as response:
            chunks = response.iter_text()
            first = next(chunks)
            first_at = time.monotonic() - started
            text = first + "".join(chunks)
        took = time.monotonic() - started
        gaps = len(stream_chunks(dialect, text)) - 1
        assert gaps >= 4
        assert took >= gaps * 0.06
        assert first_at < took / 2
        if dialect == "anthropic":
            events = anthropic_events(text)
            deltas = [
                data["delta"]["text"] for name, data in events if name == "content_block_delta"
            ]
            assert "".join(deltas) == "one two three four"

    def test_chunk_delay_ms_leaves_a_whole_answer_alone(self, fake, client):
        fake.set_fault(chunk_delay_ms=2000)
        started = time.monotonic()
        assert openai_chat(client).json()["choices"][0]["message"]["content"] == DEFAULT_TEXT
        assert time.monotonic() - started < 1

    def test_a_hang_lasts_until_the_client_gives_up_and_the_server_stays_usable(self, fake, client):
        fake.set_fault(mode="hang")
        started = time.monotonic()
        body = {"model": "llama3.1:8b", "messages": PROMPT, "stream": False}
        with pytest.raises(httpx.ReadTimeout):
            client.post("/api/chat", json=body, timeout=0.3)
        assert time.monotonic() - started < 2
        fake.set_fault(mode="ok")
        assert ollama_chat(client).status_code == 200
        assert fake.calls == 2

    def test_faults_leave_the_model_lists_healthy_unless_scope_is_all(self, fake, client):
        fake.set_fault(mode="error")
        assert client.get("/api/tags").status_code == 200
        assert client.get("/v1/models").status_code == 200
        fake.set_fault(scope="all")
        assert client.get("/api/tags").status_code == 500
        assert client.get("/v1/models").status_code == 500

    def test_error_rate_fails_that_share_of_chat_calls_while_mode_stays_ok(self, fake, client):
        fake.set_fault(error_rate=0.25, status=502)
        statuses = [openai_chat(client).status_code for _ in range(20)]
        assert statuses.count(502) == 5
        assert set(statuses) == {200, 502}
        assert statuses[3::4] == [502] * 5  # deterministic: every 4th call
        assert fake.config.mode == "ok"
        assert client.get("/v1/models").status_code == 200


class TestControl:
    def test_the_fault_endpoint_changes_the_given_fields_and_answers_the_whole_config(self, client):
        response = client.post("/_control/fault", json={"mode": "slow", "delay_ms": 50})
        assert response.status_code == 200
        config = response.json()
        assert (config["mode"], config["delay_ms"]) == ("slow", 50)
        assert config["status"] == 500 and config["scope"] == "chat"
        again = client.post("/_control/fault", json={"status": 503}).json()
        assert (again["mode"], again["delay_ms"], again["status"]) == ("slow", 50, 503)

    def test_the_fault_endpoint_sets_stall_and_chunk_delay_ms(self, fake, client):
        changes = {"mode": "stall", "delay_ms": 200, "chunk_delay_ms": 25}
        config = client.post("/_control/fault", json=changes).json()
        assert (config["mode"], config["delay_ms"], config["chunk_delay_ms"]) == ("stall", 200, 25)
        assert client.get("/_control/fault").json()["chunk_delay_ms"] == 25
        assert fake.config.chunk_delay_ms == 25

    @pytest.mark.parametrize(
        ("payload", "field"),
        [
            ({"mode": "explode"}, "mode"),
            ({"delay_ms": -1}, "delay_ms"),
            ({"delay_ms": "10"}, "delay_ms"),
            ({"chunk_delay_ms": -1}, "chunk_delay_ms"),
            ({"chunk_delay_ms": 2.5}, "chunk_delay_ms"),
            ({"chunk_delay_ms": True}, "chunk_delay_ms"),
            ({"chunk_delay_ms": None}, "chunk_delay_ms"),
            ({"chunk_delay_ms": 10**9}, "chunk_delay_ms"),
            ({"jitter_ms": -5}, "jitter_ms"),
            ({"jitter_ms": 1.5}, "jitter_ms"),
            ({"after_chunks": -1}, "after_chunks"),
            ({"after_chunks": "2"}, "after_chunks"),
            ({"cut_after_bytes": -1}, "cut_after_bytes"),
            ({"cut_after_bytes": True}, "cut_after_bytes"),
            ({"cut_after_bytes": 10**12}, "cut_after_bytes"),
            ({"status": 200}, "status"),
            ({"retry_after": 2}, "retry_after"),
            ({"error_rate": 1.5}, "error_rate"),
            ({"scope": "everything"}, "scope"),
            ({"text": None}, "text"),
            ({"models": []}, "models"),
            ({"api_key": 42}, "api_key"),
            ({"colour": "red"}, "colour"),
        ],
    )
    def test_invalid_values_are_a_400_naming_the_field(self, fake, client, payload, field):
        response = client.post("/_control/fault", json=payload)
        assert response.status_code == 400
        assert response.json()["field"] == field
        assert field in response.json()["error"]
        assert fake.config.mode == "ok"

    def test_a_control_body_that_is_not_a_json_object_is_a_400(self, client):
        for body in (b"{nope", b"[1]"):
            response = client.post("/_control/fault", content=body)
            assert response.status_code == 400
            assert response.json()["field"] == "body"

    def test_set_fault_checks_values_like_the_endpoint(self, fake):
        with pytest.raises(ConfigError) as raised:
            fake.set_fault(mode="explode")
        assert raised.value.field == "mode"
        with pytest.raises(ConfigError) as raised:
            fake.set_fault(chunk_delay_ms="50")
        assert raised.value.field == "chunk_delay_ms"

    def test_text_and_models_change_at_run_time(self, client):
        client.post("/_control/fault", json={"text": "Hello there friend", "models": ["phi3"]})
        assert ollama_chat(client).status_code == 404
        body = ollama_chat(client, model="phi3").json()
        assert (body["message"]["content"], body["eval_count"]) == ("Hello there friend", 3)
        assert [model["id"] for model in client.get("/v1/models").json()["data"]] == ["phi3"]

    def test_stats_count_every_chat_call_by_path_and_reset_zeroes_them(self, fake, client):
        ollama_chat(client)
        openai_chat(client, model="unknown")
        fake.set_fault(mode="error")
        openai_chat(client)
        client.get("/api/tags")
        stats = client.get("/_control/stats").json()
        assert stats["calls"] == 3
        assert stats["by_path"] == {"/api/chat": 1, "/v1/chat/completions": 2, "/api/tags": 1}
        assert stats["config"]["mode"] == "error"
        assert (fake.calls, fake.calls_to("/v1/chat/completions")) == (3, 2)
        reset = client.post("/_control/reset").json()
        assert (reset["calls"], reset["by_path"], reset["config"]["mode"]) == (0, {}, "ok")
        assert fake.calls == 0

    def test_reset_returns_to_the_config_the_server_started_with(self):
        with FakeProvider(models=["phi3"], api_key="sk-test", text="Hi") as fake:
            fake.set_fault(models=["other"], api_key=None, text="Bye", mode="hang")
            fake.reset()
            assert fake.config.to_dict() == {
                "mode": "ok",
                "delay_ms": 0,
                "chunk_delay_ms": 0,
                "jitter_ms": 0,
                "after_chunks": 0,
                "cut_after_bytes": 0,
                "status": 500,
                "retry_after": None,
                "error_rate": 0.0,
                "scope": "chat",
                "text": "Hi",
                "models": ["phi3"],
                "api_key": "sk-test",
                "echo_key": False,
                "tool_arguments": None,
                "tool_name": None,
                "thinking_models": [],
                "signature_key": "fake-provider",
                "vision_models": None,
                "describe_images": True,
                "embedding_models": [],
                "context_length": 8192,
                "embedding_dimensions": 8,
                "disobey": "",
                "load_ms": 0,
                "content_encoding": "",
                "piece_chars": 0,
                "tool_models": None,
            }


class TestDrillFaults:
    """What the drills play: a cut after N bytes, an error event after K chunks, a pause after K
    chunks, slow answers with jitter, refused connections."""

    @pytest.mark.parametrize("dialect", STREAMED)
    def test_cut_after_bytes_drops_the_stream_after_that_many_bytes(self, fake, client, dialect):
        fake.set_fault(mode="cut_stream", cut_after_bytes=150)
        path, body = STREAMED[dialect]
        received = b""
        with pytest.raises(httpx.RemoteProtocolError), client.stream("POST", path, json=body) as r:
            assert r.status_code == 200
            for chunk in r.iter_raw():
                received += chunk
        assert len(received) == 150

    def test_cut_after_bytes_cuts_a_whole_body_short_at_that_byte(self, fake, client):
        fake.set_fault(mode="cut_stream", cut_after_bytes=40)
        body = {"model": "llama3.1:8b", "messages": PROMPT, "stream": False}
        received = b""
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", "/api/chat", json=body) as response,
        ):
            for chunk in response.iter_raw():
                received += chunk
        assert len(received) == 40
        assert int(response.headers["content-length"]) > 40

    @pytest.mark.parametrize("dialect", ["ollama", "openai"])
    def test_stream_error_after_chunks_sends_that_many_chunks_then_the_error(
        self, fake, client, dialect
    ):
        fake.set_fault(mode="stream_error", after_chunks=3)
        path, body = STREAMED[dialect]
        chunks = stream_chunks(dialect, client.post(path, json=body).text)
        assert len(chunks) == 4
        texts = [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[:3]]
        assert all("error" not in text for text in texts)
        assert "error" in json.loads(chunks[3].removeprefix("data: "))
        assert "crashed mid-answer" in chunks[3]

    def test_stream_error_after_chunks_on_anthropic_ends_with_its_error_event(self, fake, client):
        fake.set_fault(mode="stream_error", after_chunks=5)
        path, body = STREAMED["anthropic"]
        events = anthropic_events(client.post(path, json=body).text)
        assert [name for name, _ in events] == [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "error",
        ]
        assert events[-1][1]["error"]["type"] == "api_error"

    def test_stall_after_chunks_pauses_mid_answer_not_before_the_first_chunk(self, fake, client):
        fake.set_fault(mode="stall", delay_ms=600, after_chunks=2, text="one two three four")
        path, body = STREAMED["ollama"]
        arrivals = []
        started = time.monotonic()
        with client.stream("POST", path, json=body) as response:
            for line in response.iter_lines():
                if line:
                    arrivals.append(time.monotonic() - started)
        assert len(arrivals) == 5  # four pieces and the final line
        assert arrivals[1] < 0.4  # the first two chunks at once
        assert arrivals[2] >= 0.6 and arrivals[2] - arrivals[1] > 0.5  # then the pause
        assert arrivals[-1] - arrivals[2] < 0.4

    def test_slow_with_jitter_spreads_the_waits_within_delay_plus_or_minus_jitter(
        self, fake, client
    ):
        fake.set_fault(mode="slow", delay_ms=200, jitter_ms=150)
        took = []
        for _ in range(8):
            started = time.monotonic()
            assert ollama_chat(client).status_code == 200
            took.append(time.monotonic() - started)
        assert min(took) >= 0.05
        assert max(took) < 0.35 + 0.2  # the upper bound, with room for a slow machine
        assert max(took) - min(took) > 0.02  # spread, not one fixed wait

    def test_jitter_never_makes_a_wait_negative(self, fake):
        config = fake.set_fault(mode="slow", delay_ms=10, jitter_ms=1000)
        assert config["jitter_ms"] == 1000
        waits = [fake.state.wait_s(fake.config) for _ in range(200)]
        assert min(waits) == 0.0 and max(waits) <= 1.01

    def test_refuse_refuses_connections_then_serves_again_on_the_same_port(self, client):
        with FakeProvider(models=["llama3.1:8b"]) as fake, httpx.Client(timeout=2) as pooled:
            assert pooled.get(f"{fake.url}/api/tags").status_code == 200  # a kept-alive one
            response = httpx.post(f"{fake.url}/_control/refuse", json={"for_ms": 700})
            assert response.status_code == 200
            assert response.json() == {"refusing_for_ms": 700}
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{fake.url}/api/tags", timeout=1)
            with pytest.raises(httpx.TransportError):
                pooled.get(f"{fake.url}/api/tags")  # its kept-alive connection was dropped
            deadline = time.monotonic() + 5
            while True:
                try:
                    assert httpx.get(f"{fake.url}/api/tags", timeout=1).status_code == 200
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)

    def test_refuse_in_process_and_a_second_refuse_while_refusing_is_refused(self):
        with FakeProvider() as fake:
            assert fake.refuse(0.5) is True
            assert fake.refuse(0.5) is False
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{fake.url}/api/tags", timeout=1)

    @pytest.mark.parametrize(
        ("payload", "field"),
        [({}, "for_ms"), ({"for_ms": 0}, "for_ms"), ({"for_ms": "5"}, "for_ms"), ({"x": 1}, "x")],
    )
    def test_refuse_checks_for_ms_like_the_fault_fields(self, client, payload, field):
        response = client.post("/_control/refuse", json=payload)
        assert response.status_code == 400
        assert response.json()["field"] == field
        assert client.get("/api/tags").status_code == 200


class TestHandle:
    def test_stop_refuses_connections_and_start_serves_again_on_the_same_port(self):
        fake = FakeProvider(models=["llama3.1:8b"])
        with fake:
            port = fake.port
            assert port and fake.url == f"http://127.0.0.1:{port}"
            assert httpx.get(f"{fake.url}/api/tags").status_code == 200
            fake.stop()
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{fake.url}/api/tags")
            fake.start()
            assert fake.port == port
            assert httpx.get(f"{fake.url}/api/tags").status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{fake.url}/api/tags")

    def test_stop_drops_a_hanging_call_instead_of_waiting_for_it(self):
        fake = FakeProvider(mode="hang").start()
        outcome = []

        def call():
            try:
                body = {"model": "llama3.1:8b", "messages": PROMPT, "stream": False}
                httpx.post(f"{fake.url}/api/chat", json=body, timeout=30)
            except httpx.TransportError as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 5
        while fake.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        fake.stop()
        caller.join(5)
        assert time.monotonic() - started < 2
        assert isinstance(outcome[0], httpx.RemoteProtocolError | httpx.ReadError)


def test_the_management_command_serves_it_without_a_database(tmp_path, closed_port):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(ENV_FILE="", DATA_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    command = [sys.executable, "manage.py", "fakeprovider", "--port", str(closed_port)]
    command += ["--model", "phi3", "--api-key", "sk-drill", "--mode", "rate_limit"]
    command += ["--retry-after", "7", "--jitter-ms", "15", "--after-chunks", "2"]
    command += ["--cut-after-bytes", "99"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{closed_port}"
    headers = {"Authorization": "Bearer sk-drill"}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stdout.read().decode()
            try:
                models = httpx.get(f"{url}/v1/models", headers=headers, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert [model["id"] for model in models.json()["data"]] == ["phi3"]
        body = {"model": "phi3", "messages": PROMPT}
        chat = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers)
        assert (chat.status_code, chat.headers["retry-after"]) == (429, "7")
        config = httpx.get(f"{url}/_control/fault").json()
        drill = (config["jitter_ms"], config["after_chunks"], config["cut_after_bytes"])
        assert drill == (15, 2, 99)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output = process.communicate(timeout=10)[0].decode()
    assert f"Fake provider on {url}" in output
    assert not (tmp_path / "failover.sqlite3").exists()
