"""The fake provider's Ollama as it really behaves, over real loopback HTTP: /api/show, thinking,
tool support per model, /api/generate, the API key, the busy mode, embeddings (Ollama's and
OpenAI's) and what the last request carried."""

from __future__ import annotations

import base64
import json
import math
import struct

import httpx
import openai
import pytest

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from devtools.fake_provider.ollama_extra import THINKING_TEXT

from .test_fake_tools import OPENAI_TOOLS, assert_openai

pytestmark = pytest.mark.backend_free

LLAMA, QWEN, EMBED, GPT = "llama3.1:8b", "qwen3:8b", "nomic-embed-text", "gpt-4o-mini"
ASK = [{"role": "user", "content": "Why is the sky blue?"}]
BUSY = "server busy, please try again.  maximum pending requests exceeded"


@pytest.fixture(scope="module")
def server():
    with FakeProvider(
        models=[LLAMA, QWEN, GPT],
        thinking_models=[QWEN],
        tool_models=[QWEN, GPT],
        vision_models=[QWEN],
        embedding_models=[EMBED],
        context_length=4096,
    ) as fake:
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


def lines(response: httpx.Response) -> list[dict]:
    return [json.loads(line) for line in response.text.splitlines()]


class TestShow:
    def test_it_shows_context_length_architecture_and_capabilities(self, client):
        body = client.post("/api/show", json={"model": QWEN}).json()
        assert {"modelfile", "parameters", "template", "details", "model_info"} <= set(body)
        assert body["model_info"]["general.architecture"] == "qwen"
        assert body["model_info"]["qwen.context_length"] == 4096
        assert body["capabilities"] == ["completion", "tools", "vision", "thinking"]
        assert body["details"]["format"] == "gguf"

    def test_capabilities_follow_the_models_kind(self, client):
        assert client.post("/api/show", json={"model": LLAMA}).json()["capabilities"] == [
            "completion"
        ]
        assert client.post("/api/show", json={"model": EMBED}).json()["capabilities"] == [
            "embedding"
        ]

    def test_an_unknown_model_is_a_404_in_ollamas_words(self, client):
        response = client.post("/api/show", json={"model": "nope"})
        assert response.status_code == 404
        assert response.json() == {"error": "model 'nope' not found"}


class TestThinking:
    def test_a_thinking_model_thinks_by_default_whole(self, client):
        body = {"model": QWEN, "messages": ASK, "stream": False}
        message = client.post("/api/chat", json=body).json()["message"]
        assert message == {"role": "assistant", "content": DEFAULT_TEXT, "thinking": THINKING_TEXT}

    def test_streamed_thinking_comes_in_chunks_before_the_content(self, client):
        chunks = lines(client.post("/api/chat", json={"model": QWEN, "messages": ASK}))
        thinking = [c for c in chunks if c["message"].get("thinking")]
        assert len(thinking) > 1
        assert chunks[: len(thinking)] == thinking
        assert all(c["message"]["content"] == "" for c in thinking)
        assert "".join(c["message"]["thinking"] for c in thinking) == THINKING_TEXT
        assert "".join(c["message"]["content"] for c in chunks) == DEFAULT_TEXT

    def test_think_false_turns_it_off_and_levels_turn_it_on(self, client):
        body = {"model": QWEN, "messages": ASK, "stream": False}
        assert (
            "thinking"
            not in client.post("/api/chat", json={**body, "think": False}).json()["message"]
        )
        high = client.post("/api/chat", json={**body, "think": "high"}).json()
        assert high["message"]["thinking"] == THINKING_TEXT

    def test_think_to_a_model_that_cannot_is_a_400(self, client):
        body = {"model": LLAMA, "messages": ASK, "stream": False, "think": True}
        response = client.post("/api/chat", json=body)
        assert response.status_code == 400
        assert response.json() == {"error": f'"{LLAMA}" does not support thinking'}
        ok = client.post("/api/chat", json={**body, "think": False}).json()
        assert "thinking" not in ok["message"]


def test_tools_to_a_model_without_tool_support_are_a_400(client):
    body = {"model": LLAMA, "messages": ASK, "stream": False, "tools": OPENAI_TOOLS}
    response = client.post("/api/chat", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": f"registry.ollama.ai/library/{LLAMA} does not support tools"
    }
    answer = client.post("/api/chat", json={**body, "model": QWEN, "think": False}).json()
    assert answer["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


class TestGenerate:
    def test_it_answers_in_generates_shape_whole(self, client):
        body = {
            "model": LLAMA,
            "prompt": "Why is the sky blue?",
            "system": "Be brief.",
            "stream": False,
        }
        answer = client.post("/api/generate", json=body).json()
        assert answer["response"] == DEFAULT_TEXT and "message" not in answer
        assert (answer["done"], answer["done_reason"]) == (True, "stop")
        assert answer["prompt_eval_count"] == 5 + 2

    def test_it_streams_ndjson_response_pieces(self, client):
        response = client.post(
            "/api/generate", json={"model": QWEN, "prompt": "Hi", "think": False}
        )
        assert response.headers["content-type"] == "application/x-ndjson"
        chunks = lines(response)
        assert "".join(c["response"] for c in chunks) == DEFAULT_TEXT
        assert chunks[-1]["done"] is True and chunks[-1]["response"] == ""

    def test_format_and_thinking_apply_to_generate(self, client):
        body = {"model": QWEN, "prompt": "Hi", "stream": False, "format": "json"}
        answer = client.post("/api/generate", json=body).json()
        assert json.loads(answer["response"]) == {"answer": DEFAULT_TEXT}
        assert answer["thinking"] == THINKING_TEXT

    def test_an_empty_prompt_loads_the_model(self, client):
        answer = client.post("/api/generate", json={"model": LLAMA}).json()
        assert (answer["response"], answer["done_reason"]) == ("", "load")


class TestKeysFaultsAndRecords:
    def test_an_api_key_guards_the_ollama_endpoints_with_a_bearer_token(self, fake, client):
        fake.set_fault(api_key="sk-ollama")
        body = {"model": LLAMA, "messages": ASK, "stream": False}
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            response = client.post("/api/chat", json=body, headers=headers)
            assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})
        right = {"Authorization": "Bearer sk-ollama"}
        assert client.post("/api/chat", json=body, headers=right).status_code == 200
        assert client.get("/api/tags", headers=right).status_code == 200

    def test_busy_is_ollamas_503(self, fake, client):
        fake.set_fault(mode="busy")
        response = client.post("/api/chat", json={"model": LLAMA, "messages": ASK})
        assert (response.status_code, response.json()) == (503, {"error": BUSY})
        openai_busy = client.post("/v1/chat/completions", json={"model": GPT, "messages": ASK})
        assert openai_busy.status_code == 503

    def test_a_mid_stream_error_is_an_error_line(self, fake, client):
        fake.set_fault(mode="stream_error")
        chunks = lines(client.post("/api/chat", json={"model": LLAMA, "messages": ASK}))
        assert chunks[0]["done"] is False
        assert chunks[-1] == {"error": "The model crashed mid-answer."}

    def test_the_last_request_keeps_options_keep_alive_think_and_headers(self, fake, client):
        assert fake.last_request("/api/chat") is None
        body = {
            "model": QWEN,
            "messages": ASK,
            "stream": False,
            "think": False,
            "keep_alive": "10m",
            "options": {"num_ctx": 2048, "seed": 3},
        }
        client.post("/api/chat", json=body, headers={"Authorization": "Bearer abc"})
        last = fake.last_request("/api/chat")
        assert last["body"] == body
        assert last["headers"]["authorization"] == "Bearer abc"
        fake.reset()
        assert fake.last_request("/api/chat") is None


class TestEmbeddings:
    def test_ollama_embeds_each_input_deterministically_at_unit_length(self, client):
        body = {"model": EMBED, "input": ["Why is the sky blue?", "Grass"]}
        answer = client.post("/api/embed", json=body).json()
        assert set(answer) == {
            "model",
            "embeddings",
            "total_duration",
            "load_duration",
            "prompt_eval_count",
        }
        first, second = answer["embeddings"]
        assert len(first) == 8 and first != second
        assert math.isclose(sum(x * x for x in first), 1.0)
        again = client.post("/api/embed", json={"model": EMBED, "input": "Why is the sky blue?"})
        assert again.json()["embeddings"] == [first]
        assert answer["prompt_eval_count"] == 6

    def test_ollama_dimensions_and_truncate_false_past_the_context(self, fake, client):
        sized = client.post("/api/embed", json={"model": EMBED, "input": "a", "dimensions": 3})
        assert len(sized.json()["embeddings"][0]) == 3
        fake.set_fault(context_length=2)
        long = {"model": EMBED, "input": "one two three", "truncate": False}
        assert client.post("/api/embed", json=long).status_code == 400
        assert client.post("/api/embed", json={**long, "truncate": True}).status_code == 200

    def test_a_model_that_does_not_embed_is_a_404(self, client):
        response = client.post("/api/embed", json={"model": LLAMA, "input": "x"})
        assert response.status_code == 404
        assert response.json() == {"error": f'model "{LLAMA}" not found, try pulling it first'}
        openai_404 = client.post("/v1/embeddings", json={"model": LLAMA, "input": "x"})
        assert openai_404.status_code == 404
        assert openai_404.json()["error"]["code"] == "model_not_found"

    def test_openai_embeddings_match_the_schema_and_decode_from_base64(self, fake, client):
        body = {"model": EMBED, "input": ["Why is the sky blue?", [1, 2, 3]]}
        answer = client.post("/v1/embeddings", json=body).json()
        assert_openai("CreateEmbeddingResponse", answer)
        assert [d["index"] for d in answer["data"]] == [0, 1]
        assert answer["usage"] == {"prompt_tokens": 5 + 3, "total_tokens": 5 + 3}
        encoded = client.post("/v1/embeddings", json={**body, "encoding_format": "base64"})
        raw = base64.b64decode(encoded.json()["data"][0]["embedding"])
        decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
        assert [round(x, 5) for x in decoded] == [
            round(x, 5) for x in answer["data"][0]["embedding"]
        ]
        with openai.OpenAI(base_url=fake.url + "/v1", api_key="k", max_retries=0) as sdk:
            result = sdk.embeddings.create(model=EMBED, input="Grass", dimensions=4)
        assert len(result.data[0].embedding) == 4

    def test_openai_embeddings_refuse_a_bad_input(self, client):
        response = client.post("/v1/embeddings", json={"model": EMBED, "input": [{"a": 1}]})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "input"

    def test_faults_apply_to_embeddings(self, fake, client):
        fake.set_fault(mode="error", status=502)
        assert client.post("/api/embed", json={"model": EMBED, "input": "x"}).status_code == 502
        assert fake.calls_to("/api/embed") == 1 and fake.calls == 1
