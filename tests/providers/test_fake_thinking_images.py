"""The fake provider's thinking and images, over real loopback HTTP: Anthropic's extended
thinking (whole, streamed, signed, checked when carried back), OpenAI-compatible
`reasoning_content`, Ollama's `think` and carried `thinking`, and images in each dialect
(described by their bytes' digest, refused as each provider refuses them)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from devtools.fake_provider import DEFAULT_TEXT, FakeProvider
from devtools.fake_provider.images import png, sniff
from devtools.fake_provider.thinking import THINKING_TEXT, ThinkingSource, sign

from .test_fake_tools import ANTHROPIC_TOOLS, OPENAI_TOOLS, assert_openai, sse_data

pytestmark = pytest.mark.backend_free

KEY = "sk-fake-thinking"
GPT, REASONER, CLAUDE = "gpt-4o-mini", "deepseek-reasoner", "claude-sonnet-4-5"
LLAMA, QWEN = "llama3.1:8b", "qwen3:8b"
ASK = [{"role": "user", "content": "What is in the picture?"}]
ENABLED = {"type": "enabled", "budget_tokens": 1024}
THOUGHT_TOKENS = len(THINKING_TEXT.split())
ANSWER_TOKENS = len(DEFAULT_TEXT.split())
URL = "https://example.com/cat.png"
URL_PARAM = "messages.[0].content.[0].image_url.url"


@pytest.fixture(scope="module")
def server():
    with FakeProvider(
        models=[GPT, REASONER, CLAUDE, LLAMA, QWEN], api_key=KEY, thinking_models=[REASONER, QWEN]
    ) as fake:
        yield fake


@pytest.fixture
def fake(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def client(fake):
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    with httpx.Client(base_url=fake.url, timeout=5, headers=headers) as client:
        yield client


@pytest.fixture
def claude(fake):
    with anthropic.Anthropic(base_url=fake.url, api_key=KEY, max_retries=0) as client:
        yield client


@pytest.fixture
def oai(fake):
    with openai.OpenAI(base_url=fake.url + "/v1", api_key=KEY, max_retries=0) as client:
        yield client


def messages(client: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"model": CLAUDE, "max_tokens": 2048, "messages": ASK, **fields}
    return client.post("/v1/messages", json=body)


def anthropic_error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["type"], body["error"]["type"]) == ("error", "invalid_request_error")
    return body["error"]["message"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def line(number: int, data: bytes) -> str:
    return f"image {number}: {len(data)} bytes sha256 {hashlib.sha256(data).hexdigest()}"


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": b64(data)}
    return {"type": "image", "source": source}


def signed_turn(client: httpx.Client) -> dict[str, Any]:
    """The assistant turn of a thinking answer with a tool_use, as the fake sent it."""
    answer = messages(client, thinking=ENABLED, tools=ANTHROPIC_TOOLS).json()
    return {"role": "assistant", "content": answer["content"]}


def tool_result(turn: dict[str, Any], content: Any = "22 degrees") -> dict[str, Any]:
    use = next(block for block in turn["content"] if block["type"] == "tool_use")
    block = {"type": "tool_result", "tool_use_id": use["id"], "content": content}
    return {"role": "user", "content": [block]}


class TestAnthropicThinking:
    def test_enabled_thinking_starts_the_answer_with_a_signed_thinking_block(self, claude):
        message = claude.messages.create(
            model=CLAUDE, max_tokens=2048, messages=ASK, thinking=ENABLED
        )
        first, text = message.content
        assert isinstance(first, anthropic.types.ThinkingBlock)
        assert first.thinking == THINKING_TEXT
        assert first.signature == sign(THINKING_TEXT, "fake-provider")
        assert text.text == DEFAULT_TEXT
        assert message.usage.output_tokens == ANSWER_TOKENS + THOUGHT_TOKENS

    def test_adaptive_thinking_thinks_too_and_disabled_or_absent_does_not(self, client):
        adaptive = messages(client, thinking={"type": "adaptive"}).json()
        assert [b["type"] for b in adaptive["content"]] == ["thinking", "text"]
        for fields in ({"thinking": {"type": "disabled"}}, {}):
            plain = messages(client, **fields).json()
            assert [b["type"] for b in plain["content"]] == ["text"]

    def test_a_stream_sends_thinking_deltas_and_a_signature_delta_before_the_text(
        self, client, claude
    ):
        events = sse_data(messages(client, thinking=ENABLED, stream=True))
        kinds = [e["type"] for e in events]
        n = THOUGHT_TOKENS
        assert kinds[:3] == ["message_start", "content_block_start", "ping"]
        assert events[1] == {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
        thought = [e["delta"] for e in events[3 : 3 + n]]
        assert {d["type"] for d in thought} == {"thinking_delta"}
        assert "".join(d["thinking"] for d in thought) == THINKING_TEXT
        assert events[3 + n]["delta"] == {
            "type": "signature_delta",
            "signature": sign(THINKING_TEXT, "fake-provider"),
        }
        assert events[4 + n] == {"type": "content_block_stop", "index": 0}
        assert events[5 + n]["index"] == 1 and events[5 + n]["content_block"]["type"] == "text"
        assert kinds.count("ping") == 1
        text = [e for e in events if e.get("delta", {}).get("type") == "text_delta"]
        assert {e["index"] for e in text} == {1}
        assert events[-2]["usage"]["output_tokens"] == ANSWER_TOKENS + n
        with claude.messages.stream(
            model=CLAUDE, max_tokens=2048, messages=ASK, thinking=ENABLED
        ) as stream:
            final = stream.get_final_message()
        assert final.content[0].thinking == THINKING_TEXT
        assert final.content[0].signature == sign(THINKING_TEXT, "fake-provider")
        assert final.content[1].text == DEFAULT_TEXT

    def test_thinking_comes_before_a_tool_use_whole_and_streamed(self, client, claude):
        whole = messages(client, thinking=ENABLED, tools=ANTHROPIC_TOOLS).json()
        assert [b["type"] for b in whole["content"]] == ["thinking", "tool_use"]
        assert whole["stop_reason"] == "tool_use"
        with claude.messages.stream(
            model=CLAUDE, max_tokens=2048, messages=ASK, thinking=ENABLED, tools=ANTHROPIC_TOOLS
        ) as stream:
            final = stream.get_final_message()
        thought, use = final.content
        assert (thought.thinking, use.name) == (THINKING_TEXT, "get_weather")

    def test_display_omitted_sends_an_empty_thought_signed_all_the_same(self, client):
        omitted = {**ENABLED, "display": "omitted"}
        block = messages(client, thinking=omitted).json()["content"][0]
        assert block == {"type": "thinking", "thinking": "", "signature": sign("", "fake-provider")}
        events = sse_data(messages(client, thinking=omitted, stream=True))
        assert not [e for e in events if e.get("delta", {}).get("type") == "thinking_delta"]

    @pytest.mark.parametrize(
        ("fields", "said"),
        [
            ({"thinking": {"type": "enabled", "budget_tokens": 1023}}, "greater than or equal"),
            ({"thinking": {"type": "enabled"}}, "budget_tokens: Field required"),
            (
                {"thinking": {"type": "enabled", "budget_tokens": 2048}},
                "`max_tokens` must be greater than `thinking.budget_tokens`",
            ),
            ({"thinking": ENABLED, "temperature": 0.5}, "`temperature` may only be set to 1"),
            ({"thinking": {"type": "adaptive"}, "temperature": 0}, "`temperature`"),
            ({"thinking": ENABLED, "top_k": 5}, "`top_k` must be unset"),
            ({"thinking": ENABLED, "top_p": 0.5}, "`top_p` must be greater than or equal to 0.95"),
            (
                {"thinking": ENABLED, "tools": ANTHROPIC_TOOLS, "tool_choice": {"type": "any"}},
                "tool_choice forces tool use",
            ),
            ({"thinking": {"type": "sometimes"}}, "Input tag 'sometimes'"),
            ({"thinking": {**ENABLED, "display": "full"}}, "display"),
        ],
    )
    def test_thinking_anthropic_would_refuse_is_its_400(self, client, fields, said):
        assert said in anthropic_error(messages(client, **fields))

    def test_temperature_one_and_a_high_top_p_are_taken_with_thinking(self, client):
        answer = messages(client, thinking=ENABLED, temperature=1, top_p=0.95)
        assert answer.status_code == 200

    def test_the_fakes_own_thinking_is_taken_back_and_recorded(self, fake, client):
        turn = signed_turn(client)
        conversation = [*ASK, turn, tool_result(turn)]
        answer = messages(client, thinking=ENABLED, tools=ANTHROPIC_TOOLS, messages=conversation)
        assert answer.status_code == 200, answer.text
        assert answer.json()["content"][1]["text"] == "The tool said: 22 degrees"
        (received,) = fake.thinking_received("/v1/messages")
        assert (received.message, received.block, received.source) == (
            1,
            0,
            ThinkingSource.ANTHROPIC_THINKING,
        )
        assert (received.text, received.signed_here) == (THINKING_TEXT, True)

    @pytest.mark.parametrize(
        ("change", "said"),
        [
            ({"signature": "RXFRQkNrZ0lBUkFCR0FJ"}, "messages.1.content.0: Invalid `signature`"),
            ({"thinking": "I edited this."}, "Invalid `signature` in `thinking` block"),
            ({"signature": None}, "messages.1.content.0.thinking.signature: Field required"),
        ],
    )
    def test_forged_or_edited_thinking_is_anthropics_400(self, fake, client, change, said):
        turn = signed_turn(client)
        forged = {**turn["content"][0], **change}
        forged = {k: v for k, v in forged.items() if v is not None}
        conversation = [
            *ASK,
            {**turn, "content": [forged, *turn["content"][1:]]},
            tool_result(turn),
        ]
        assert said in anthropic_error(messages(client, messages=conversation))
        (received,) = fake.thinking_received("/v1/messages")
        assert received.signed_here is False

    def test_another_providers_signature_is_refused_even_without_thinking_on(self, fake, client):
        turn = signed_turn(client)
        fake.set_fault(signature_key="another-provider")
        conversation = [*ASK, turn, tool_result(turn)]
        assert "Invalid `signature`" in anthropic_error(messages(client, messages=conversation))

    def test_redacted_thinking_the_fake_never_makes_is_refused(self, client):
        turn = signed_turn(client)
        redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
        conversation = [*ASK, {**turn, "content": [redacted, *turn["content"][1:]]}]
        conversation.append(tool_result(turn))
        assert "redacted_thinking" in anthropic_error(messages(client, messages=conversation))

    def test_with_thinking_enabled_a_tool_turn_must_start_with_its_thinking(self, client):
        turn = signed_turn(client)
        bare = {**turn, "content": turn["content"][1:]}
        conversation = [*ASK, bare, tool_result(turn)]
        said = anthropic_error(messages(client, thinking=ENABLED, messages=conversation))
        assert said.startswith("messages.1.content.0.type: Expected `thinking` or")
        assert "found `tool_use`" in said
        assert messages(client, messages=conversation).status_code == 200  # thinking off

    def test_effort_context_management_and_top_k_are_taken(self, client):
        answer = messages(
            client,
            output_config={"effort": "low"},
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
            top_k=40,
        )
        assert answer.status_code == 200
        assert answer.json()["content"][0]["text"] == DEFAULT_TEXT

    @pytest.mark.parametrize(
        ("fields", "said"),
        [
            ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
            ({"output_config": "high"}, "output_config: Input should be a valid dictionary"),
            ({"top_k": "many"}, "top_k: Input should be a valid integer"),
            ({"context_management": []}, "context_management"),
        ],
    )
    def test_malformed_options_are_a_400(self, client, fields, said):
        assert said in anthropic_error(messages(client, **fields))


def openai_chat(client: httpx.Client, **fields: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": REASONER, "messages": ASK, **fields})


class TestOpenAIReasoning:
    def test_a_thinking_model_with_reasoning_effort_carries_reasoning_content(self, client):
        body = openai_chat(client, reasoning_effort="high").json()
        assert_openai("CreateChatCompletionResponse", body)
        message = body["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == (THINKING_TEXT, DEFAULT_TEXT)
        assert body["usage"]["completion_tokens"] == ANSWER_TOKENS + THOUGHT_TOKENS
        assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": THOUGHT_TOKENS}

    def test_streamed_reasoning_content_comes_before_the_content(self, client):
        stream = {"stream": True, "stream_options": {"include_usage": True}}
        chunks = sse_data(openai_chat(client, reasoning_effort="low", **stream))
        for chunk in chunks:
            assert_openai("CreateChatCompletionStreamResponse", chunk)
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        kinds = [key for d in deltas for key in ("reasoning_content", "content") if d.get(key)]
        assert kinds == ["reasoning_content"] * THOUGHT_TOKENS + ["content"] * ANSWER_TOKENS
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == THINKING_TEXT
        assert "".join(d.get("content") or "" for d in deltas) == DEFAULT_TEXT
        assert [d.get("role") for d in deltas].count("assistant") == 1
        assert deltas[0]["role"] == "assistant"
        assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == (
            THOUGHT_TOKENS
        )

    def test_reasoning_comes_before_a_tool_call(self, client, oai):
        body = openai_chat(client, reasoning_effort="medium", tools=OPENAI_TOOLS).json()
        message = body["choices"][0]["message"]
        assert message["reasoning_content"] == THINKING_TEXT
        assert message["tool_calls"][0]["function"]["name"] == "get_weather"
        with oai.chat.completions.stream(
            model=REASONER, messages=ASK, tools=OPENAI_TOOLS, reasoning_effort="medium"
        ) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.tool_calls[0].function.name == "get_weather"

    @pytest.mark.parametrize(
        ("model", "effort"), [(GPT, "high"), (REASONER, None), (REASONER, "none")]
    )
    def test_no_reasoning_without_effort_without_a_thinking_model_or_with_none(
        self, client, model, effort
    ):
        fields = {"reasoning_effort": effort} if effort else {}
        body = openai_chat(client, model=model, **fields).json()
        assert "reasoning_content" not in body["choices"][0]["message"]
        assert "completion_tokens_details" not in body["usage"]

    @pytest.mark.parametrize("effort", ["minimal", "xhigh", "max"])
    def test_every_documented_effort_is_taken(self, client, effort):
        assert openai_chat(client, reasoning_effort=effort).status_code == 200

    def test_an_unknown_effort_is_a_400_naming_reasoning_effort(self, client):
        response = openai_chat(client, reasoning_effort="extreme")
        assert response.status_code == 400
        assert_openai("ErrorResponse", response.json())
        assert response.json()["error"]["param"] == "reasoning_effort"

    def test_reasoning_content_carried_back_is_taken_and_recorded(self, fake, client):
        turn = {"role": "assistant", "content": "Hi.", "reasoning_content": "Earlier thought."}
        response = openai_chat(client, messages=[*ASK, turn, *ASK])
        assert response.status_code == 200
        (received,) = fake.thinking_received("/v1/chat/completions")
        assert (received.message, received.source, received.text) == (
            1,
            ThinkingSource.REASONING_CONTENT,
            "Earlier thought.",
        )


def ollama_chat(client: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"model": QWEN, "messages": ASK, "stream": False, **fields}
    return client.post("/api/chat", json=body)


class TestOllamaThinking:
    @pytest.mark.parametrize("think", [True, "low", "medium", "high", "max"])
    def test_think_true_or_a_level_thinks(self, client, think):
        message = ollama_chat(client, think=think).json()["message"]
        assert message["thinking"] == THINKING_TEXT

    def test_think_false_does_not_and_another_value_is_a_400(self, client):
        assert "thinking" not in ollama_chat(client, think=False).json()["message"]
        response = ollama_chat(client, think="extreme")
        assert response.status_code == 400 and set(response.json()) == {"error"}

    def test_an_assistant_message_may_carry_its_thinking_back(self, fake, client):
        turn = {"role": "assistant", "content": "Hi.", "thinking": "Earlier thought."}
        response = ollama_chat(client, messages=[*ASK, turn, *ASK])
        assert response.status_code == 200
        (received,) = fake.thinking_received("/api/chat")
        assert (received.message, received.source, received.text) == (
            1,
            ThinkingSource.OLLAMA,
            "Earlier thought.",
        )

    def test_thinking_that_is_not_a_string_is_gos_decoding_error(self, client):
        turn = {"role": "assistant", "content": "Hi.", "thinking": 3}
        response = ollama_chat(client, messages=[*ASK, turn, *ASK])
        assert response.status_code == 400
        assert response.json()["error"].startswith("json: cannot unmarshal number")


PNG_A, PNG_B = png(1), png(2, width=3, height=2)


class TestImages:
    def test_the_png_helper_makes_distinct_real_pngs(self):
        assert sniff(PNG_A) == sniff(PNG_B) == "image/png" and PNG_A != PNG_B

    def test_anthropic_images_are_described_by_their_bytes_in_order(self, client):
        content = [
            {"type": "text", "text": "Compare these."},
            image_block(PNG_A),
            {"type": "image", "source": {"type": "url", "url": URL}},
            image_block(PNG_B),
        ]
        answer = messages(client, messages=[{"role": "user", "content": content}]).json()
        assert answer["content"][0]["text"] == "\n".join(
            [line(1, PNG_A), f"image 2: url {URL}", line(3, PNG_B)]
        )
        streamed = sse_data(
            messages(client, messages=[{"role": "user", "content": content}], stream=True)
        )
        text = "".join(e["delta"]["text"] for e in streamed if e["type"] == "content_block_delta")
        assert text == answer["content"][0]["text"]

    def test_an_image_in_a_tool_result_is_described_instead_of_echoed(self, client, fake):
        fake.set_fault(tool_name="get_time")
        turn = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}],
        }
        result = tool_result(turn, [{"type": "text", "text": "A screenshot."}, image_block(PNG_A)])
        conversation = [*ASK, turn, result]
        answer = messages(client, messages=conversation, tools=ANTHROPIC_TOOLS).json()
        assert answer["content"][0]["text"] == line(1, PNG_A)

    def test_with_tools_offered_the_answer_is_still_the_tool_call(self, client):
        content = [{"type": "text", "text": "Look."}, image_block(PNG_A)]
        answer = messages(
            client, messages=[{"role": "user", "content": content}], tools=ANTHROPIC_TOOLS
        ).json()
        assert answer["content"][0]["type"] == "tool_use"

    @pytest.mark.parametrize(
        ("block", "said"),
        [
            (image_block(PNG_A, "image/jpeg"), "appears to be a image/png image"),
            (image_block(b"not an image"), "Could not process image"),
            (image_block(PNG_A, "image/bmp"), "media_type: Input should be"),
            (
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "%%%"}},
                "Invalid base64",
            ),
            ({"type": "image", "source": {"type": "path", "path": "/a.png"}}, "Input tag 'path'"),
            ({"type": "image", "source": {"type": "url", "url": "ftp://x/a.png"}}, "HTTP"),
        ],
    )  # fmt: skip
    def test_malformed_anthropic_images_are_its_400(self, client, block, said):
        response = messages(client, messages=[{"role": "user", "content": [block]}])
        said_now = anthropic_error(response)
        assert said_now.startswith("messages.0.content.0") and said in said_now

    def test_openai_data_urls_and_http_urls_are_described(self, client):
        content = [
            {"type": "text", "text": "Compare these."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG_A)}"}},
            {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
        ]
        body = openai_chat(client, model=GPT, messages=[{"role": "user", "content": content}])
        assert body.json()["choices"][0]["message"]["content"] == (
            f"{line(1, PNG_A)}\nimage 2: url {URL}"
        )

    @pytest.mark.parametrize(
        ("role", "url", "param"),
        [
            ("user", "data:image/png;base64,%%%", URL_PARAM),
            ("user", f"data:image/png;base64,{b64(b'text')}", URL_PARAM),
            ("user", "file:///etc/passwd", URL_PARAM),
            ("system", URL, "messages.[0].content.[0].type"),
        ],
    )
    def test_malformed_openai_images_are_its_400(self, client, role, url, param):
        content = [{"type": "image_url", "image_url": {"url": url}}]
        response = openai_chat(client, model=GPT, messages=[{"role": role, "content": content}])
        assert response.status_code == 400
        assert_openai("ErrorResponse", response.json())
        assert response.json()["error"]["param"] == param

    def test_ollama_images_are_described(self, client):
        message = {"role": "user", "content": "Compare these.", "images": [b64(PNG_A), b64(PNG_B)]}
        answer = ollama_chat(client, model=LLAMA, messages=[message]).json()
        assert answer["message"]["content"] == f"{line(1, PNG_A)}\n{line(2, PNG_B)}"

    def test_ollama_images_that_are_not_base64_are_its_400(self, client):
        message = {"role": "user", "content": "Look.", "images": ["iVBOR!w0K"]}
        response = ollama_chat(client, model=LLAMA, messages=[message])
        assert (response.status_code, response.json()) == (
            400,
            {"error": "illegal base64 data at input byte 5"},
        )
        response = ollama_chat(client, model=LLAMA, messages=[{**message, "images": "abc"}])
        assert response.status_code == 400

    def test_a_model_without_vision_answers_its_providers_400(self, fake, client):
        fake.set_fault(vision_models=[QWEN])
        anthropic_content = [{"type": "text", "text": "Look."}, image_block(PNG_A)]
        said = anthropic_error(
            messages(client, messages=[{"role": "user", "content": anthropic_content}])
        )
        assert said.startswith("messages.0.content.1:") and "image" in said
        part = {"type": "image_url", "image_url": {"url": URL}}
        refused = openai_chat(client, model=GPT, messages=[{"role": "user", "content": [part]}])
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "Invalid content type. image_url is only supported by certain models."
        )
        assert refused.json()["error"]["param"] == "messages.[0].content.[0].type"
        ollama_message = {"role": "user", "content": "Look.", "images": [b64(PNG_A)]}
        for model, status in ((LLAMA, 400), (QWEN, 200)):
            response = ollama_chat(client, model=model, messages=[ollama_message], think=False)
            assert response.status_code == status
        assert ollama_chat(client, model=LLAMA, messages=[ollama_message]).json() == {
            "error": "this model is missing data required for image input"
        }
        shown = client.post("/api/show", json={"model": LLAMA}).json()["capabilities"]
        assert "vision" not in shown

    def test_describe_images_false_leaves_the_configured_answer(self, fake, client):
        fake.set_fault(describe_images=False)
        message = {"role": "user", "content": "Look.", "images": [b64(PNG_A)]}
        answer = ollama_chat(client, model=LLAMA, messages=[message]).json()
        assert answer["message"]["content"] == DEFAULT_TEXT

    def test_images_and_thinking_together(self, client):
        content = [image_block(PNG_A)]
        answer = messages(
            client, messages=[{"role": "user", "content": content}], thinking=ENABLED
        ).json()
        assert [b["type"] for b in answer["content"]] == ["thinking", "text"]
        assert answer["content"][1]["text"] == line(1, PNG_A)

    def test_the_new_fields_are_checked_like_the_others(self, client):
        for payload, field in (
            ({"vision_models": "gpt"}, "vision_models"),
            ({"describe_images": "yes"}, "describe_images"),
            ({"signature_key": ""}, "signature_key"),
        ):
            response = client.post("/_control/fault", json=payload)
            assert (response.status_code, response.json()["field"]) == (400, field)


def test_a_json_dump_of_the_config_lists_the_new_fields(fake):
    fake.set_fault(vision_models=[GPT], tool_name="Read")
    config = json.loads(json.dumps(fake.config.to_dict()))
    assert (config["vision_models"], config["tool_name"], config["describe_images"]) == (
        [GPT],
        "Read",
        True,
    )
