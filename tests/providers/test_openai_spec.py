"""The OpenAI-compatible answers checked against OpenAI's published OpenAPI document (its JSON
Schemas, through tests/spec.py): a whole answer, a stream's chunks, a static answer, the model
list, the errors and the event that ends a broken stream. The gateway's own schemas are checked
in test_openapi.py; these say its answers are also OpenAI's.

None of OpenAI's schemas here forbids extra properties, so the gateway's `failover` object (on a
completion and on a stream's first chunk) and a model's `upstream_model` are validated in place.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.spec import assert_openai, ollama_fields, openai_document, sse_events

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Say hello."}]
ANSWER_SCHEMAS = ("CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "Model")


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": HELLO, **fields}


async def streamed(api: httpx.AsyncClient, **fields: Any) -> list[dict[str, Any] | str]:
    """The events of a streamed answer (a finite stream: the in-process client reads it whole)."""
    response = await api.post(URL, json=chat(stream=True, **fields))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return sse_events(response.text)


@pytest.mark.backend_free
@pytest.mark.parametrize("name", ANSWER_SCHEMAS)
def test_openais_answer_schemas_leave_room_for_the_gateways_extra_fields(name):
    schema = openai_document()["components"]["schemas"][name]
    assert schema.get("additionalProperties", True) is not False
    assert "unevaluatedProperties" not in schema


async def test_the_primarys_whole_answer_is_openais_chat_completion(api, primary):
    response = await api.post(URL, json=chat())
    assert response.status_code == 200
    body = response.json()
    assert body["failover"]["tier"] == "primary"
    assert_openai("CreateChatCompletionResponse", body)


async def test_each_chunk_of_a_stream_with_its_usage_is_openais_chunk_and_it_ends_with_done(
    api, primary
):
    *chunks, done = await streamed(api, stream_options={"include_usage": True})
    assert done == "[DONE]"
    assert len(chunks) >= 3
    for chunk in chunks:
        assert_openai("CreateChatCompletionStreamResponse", chunk)
    assert isinstance(chunks[-1], dict) and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 7


async def test_a_static_answer_is_openais_chat_completion(api, primary, secondary):
    primary.stop()
    secondary.stop()
    response = await api.post(
        URL, json=chat(messages=[{"role": "user", "content": "What are your opening hours?"}])
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["model"], body["failover"]["tier"]) == ("static", "static")
    assert_openai("CreateChatCompletionResponse", body)


async def test_the_model_list_is_openais_list_of_models(api):
    response = await api.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert_openai("ListModelsResponse", body)
    assert [model["id"] for model in body["data"]] == [
        "auto",
        "ollama-local",
        "openai-cloud",
        "llama3.1:8b",
        "gpt-4o-mini",
    ]
    for model in body["data"]:
        assert_openai("Model", model)


@pytest.mark.parametrize(
    ("body", "status"),
    [({"model": "auto"}, 400), (chat(model="gpt-5-turbo"), 404)],
    ids=["no-messages", "unknown-model"],
)
async def test_a_refused_request_is_openais_error_response(api, primary, body, status):
    response = await api.post(URL, json=body)
    assert response.status_code == status
    assert_openai("ErrorResponse", response.json())
    assert primary.calls == 0


async def test_the_event_that_ends_a_broken_stream_is_openais_error_response(api, primary):
    # OpenAI's document has no schema for a stream's error event; its SDKs read an event with
    # an `error` member as an API error (ErrorResponse's shape), so that is what is checked.
    primary.set_fault(mode="stream_error")
    *chunks, last = await streamed(api)
    assert chunks, "the stream broke before its first chunk"
    for chunk in chunks:
        assert_openai("CreateChatCompletionStreamResponse", chunk)
    assert isinstance(last, dict) and last["error"]["code"] == "stream_interrupted"
    assert_openai("ErrorResponse", last)


@pytest.mark.backend_free
def test_ollamas_reference_reads_as_each_endpoints_fields():
    assert {"model", "messages", "stream", "options", "format"} <= ollama_fields(
        "Generate a chat completion"
    )
    assert {"role", "content", "tool_calls"} <= ollama_fields(
        "Generate a chat completion", of="message"
    )
    assert "role" not in ollama_fields("Generate a chat completion")
    assert {"model", "input", "truncate"} <= ollama_fields("Generate Embeddings")
