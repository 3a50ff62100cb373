"""`POST /v1/embeddings` through the providers that embed: the official SDK's
`embeddings.create`, failover between dialects, model names, and no stand-in when none can."""

from __future__ import annotations

import base64
import struct

import openai
import pytest
from asgiref.sync import sync_to_async

from providers.models import Provider
from tests.factories import TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows
from tests.spec import assert_openai

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/embeddings"
LOCAL_MODEL = "nomic-embed-text"
CLOUD_MODEL = "text-embedding-3-small"


@pytest.fixture
def embedders(providers_configured, primary, secondary) -> None:
    """Both providers embed: Ollama with nomic-embed-text, the cloud with OpenAI's model."""
    primary.set_fault(embedding_models=[LOCAL_MODEL])
    secondary.set_fault(embedding_models=[CLOUD_MODEL])
    Provider.objects.filter(name="ollama-local").update(embedding_models=LOCAL_MODEL)
    Provider.objects.filter(name="openai-cloud").update(embedding_models=CLOUD_MODEL)


def _body(response) -> dict:
    assert response.status_code == 200, response.text
    body = response.json()
    if isinstance(body["data"][0]["embedding"], list):  # the document knows no base64 strings
        assert_openai("CreateEmbeddingResponse", body)
    return body


async def test_the_sdk_embeds_through_the_primary_then_the_cloud_when_it_is_down(
    embedders, live_url, gateway, primary, secondary
):
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0
    ) as client:
        local = await client.embeddings.create(model="auto", input=["one", "two"])
        primary.set_fault(mode="error")
        cloud = await client.embeddings.create(model="auto", input="one")
    assert (local.model, len(local.data), len(local.data[0].embedding)) == (LOCAL_MODEL, 2, 8)
    assert local.data[0].embedding != local.data[1].embedding
    assert cloud.model == CLOUD_MODEL and len(cloud.data[0].embedding) == 8
    assert primary.last_request("/api/embed")["body"]["truncate"] is False
    # The SDK asks for base64 and decodes it: the gateway encoded the cloud's floats.
    assert secondary.last_request("/v1/embeddings")["body"]["model"] == CLOUD_MODEL
    first, second = await ledger_rows(gateway)
    assert (first.final_provider, first.tier, first.outcome) == ("ollama-local", "primary", "ok")
    assert first.tokens_in > 0 and first.model == LOCAL_MODEL
    assert (second.final_provider, second.tier) == ("openai-cloud", "secondary")
    assert second.attempts[0]["error_class"] == "server_error"


async def test_base64_is_little_endian_float32_of_the_same_vector(embedders, api, gateway):
    floats = _body(await api.post(URL, json={"model": "auto", "input": "hello"}))
    packed = _body(
        await api.post(URL, json={"model": "auto", "input": "hello", "encoding_format": "base64"})
    )
    vector = floats["data"][0]["embedding"]
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert struct.unpack(f"<{len(vector)}f", raw) == pytest.approx(vector, rel=1e-6)


async def test_an_embedding_models_name_goes_to_the_providers_that_serve_it(
    embedders, api, gateway, primary
):
    body = _body(await api.post(URL, json={"model": CLOUD_MODEL, "input": "x", "dimensions": 4}))
    assert body["model"] == CLOUD_MODEL and len(body["data"][0]["embedding"]) == 4
    assert body["failover"]["provider"] == "openai-cloud"
    assert primary.calls == 0
    by_provider = _body(await api.post(URL, json={"model": "ollama-local", "input": "x"}))
    assert by_provider["model"] == LOCAL_MODEL


async def test_an_input_over_ollamas_context_goes_to_a_larger_window(
    embedders, api, gateway, primary
):
    primary.set_fault(context_length=3)
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(context_window=2048)
    body = _body(await api.post(URL, json={"model": "auto", "input": "four words are here"}))
    assert body["failover"]["provider"] == "openai-cloud"
    [record] = await ledger_rows(gateway)
    assert record.attempts[0]["error_class"] == "context_too_long"


async def test_with_no_provider_answering_the_client_gets_a_503_not_a_stand_in(
    embedders, api, gateway, primary, secondary
):
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error")
    response = await api.post(URL, json={"model": "auto", "input": "What are your opening hours?"})
    assert response.status_code == 503
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "providers_unavailable")


async def test_a_provider_that_names_no_embedding_model_is_never_asked(
    providers_configured, api, gateway, primary, secondary
):
    await sync_to_async(Provider.objects.filter(name="openai-cloud").update)(
        embedding_models=CLOUD_MODEL
    )
    secondary.set_fault(embedding_models=[CLOUD_MODEL])
    body = _body(await api.post(URL, json={"model": "auto", "input": "x"}))
    assert body["failover"]["provider"] == "openai-cloud"
    assert primary.calls == 0


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"model": "auto", "input": [1, 2, 3]}, 400, "input", "unsupported_parameter"),
        ({"model": "auto", "input": ["ok", " "]}, 400, "input", "invalid_field"),
        ({"model": "auto"}, 400, "input", "invalid_field"),
        ({"model": "auto", "input": "x", "dimensions": 0}, 400, "dimensions", "invalid_field"),
        ({"model": "auto", "input": "x", "encoding_format": "hex"}, 400, "encoding_format", None),
        ({"model": "no-such-model", "input": "x"}, 404, "model", "model_not_found"),
    ],
    ids=["token-arrays", "blank-input", "no-input", "zero-dimensions", "hex", "unknown-model"],
)
async def test_each_mistake_is_answered_in_openais_error_shape(
    embedders, api, gateway, primary, body, status, param, code
):
    response = await api.post(URL, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert_openai("ErrorResponse", response.json())
    assert primary.calls == 0


async def test_each_input_is_held_to_the_window_on_its_own_not_the_batch(
    embedders, api, gateway, primary
):
    batch = [("word " * 100).strip() + f" {n}" for n in range(80)]  # ~10,000 tokens in all
    body = _body(await api.post(URL, json={"model": "auto", "input": batch}))
    assert len(body["data"]) == 80 and body["failover"]["provider"] == "ollama-local"
