"""`GET /api/openapi.json` describes the API as the code runs it: a valid OpenAPI 3.1 document,
built from the validator's own field tables, within OpenAI's Chat Completions request, and
holding up against Schemathesis run on the live platform, with a client key, without one and
with a bad one: no 5xx, no status, header or body the document doesn't promise."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import jsonschema_rs
import pytest
import schemathesis
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    positive_data_acceptance,
    response_schema_conformance,
)
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from edge.api import validation
from edge.api.complete import request as complete_request
from edge.api.json_body import ApiError
from edge.api.openai import chat_request, embeddings_request
from edge.api.openapi import openapi_document
from tests.factories import AUTH
from tests.providers.conftest import platform_served
from tests.serving import handed

# The tests on the document itself touch no database and no shared state; the others get the
# database through the platform's fixtures.
pure = pytest.mark.backend_free
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# The shared reference documents sit beside the project (see their README), or where
# FAILOVER_REFERENCE_DIR says.
REFERENCE_DIR = Path(os.environ.get("FAILOVER_REFERENCE_DIR", ROOT.parent / "shared" / "reference"))
OPENAI_REFERENCE = REFERENCE_DIR / "openai-openapi.json"
# Fields the gateway adds to a Chat Completions request, which OpenAI's has not.
GATEWAY_OWN = {"priority", "task", "allow_cloud", "cache"}
COMPONENTS_ROOT = {"components": openapi_document()["components"]}


def _schemathesis_config(*, make_up_keys: bool) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            # The same examples every run, so CI sees what a developer saw.
            "seed": 20_260_101,
            "generation": {
                "max-examples": 30,
                "deterministic": True,
                "database": "none",  # nor examples replayed from an earlier run
                # Keys Schemathesis makes up itself are never valid ones.
                "with-security-parameters": make_up_keys,
            },
        }
    )


@pytest.fixture
def platform_url(providers_configured) -> Iterator[str]:
    """The whole platform on a loopback port, with its own gateway and the fake providers."""
    with platform_served() as url:
        yield url


def _reference() -> dict[str, Any]:
    # The reference's own README: a clone without the shared folder skips, naming the file;
    # CI has it (and there a skip fails the run: tests/conftest.py).
    if not OPENAI_REFERENCE.exists():
        pytest.skip(f"OpenAI's OpenAPI document is not here: {OPENAI_REFERENCE}")
    return json.loads(OPENAI_REFERENCE.read_text(encoding="utf-8"))


def _as_json_schema(node: Any) -> Any:
    """OpenAI's document marks some values `nullable` (OpenAPI 3.0's word); in the JSON Schema
    of 3.1 that is a "null" type beside the others."""
    if isinstance(node, list):
        return [_as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _as_json_schema(value) for key, value in node.items()}
    if converted.get("nullable") is True:  # the keyword (a property so named is a schema)
        del converted["nullable"]
        if isinstance(converted.get("type"), str):
            converted["type"] = [converted["type"], "null"]
        if "enum" in converted:
            converted["enum"] = [*converted["enum"], None]
        if "type" not in converted and "enum" not in converted:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def _openai_validator(reference: dict[str, Any], name: str) -> jsonschema_rs.Validator:
    components = _as_json_schema(reference["components"])
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{name}", "components": components}
    )


def _properties(schema: dict[str, Any], schemas: dict[str, Any]) -> set[str]:
    if "$ref" in schema:
        return _properties(schemas[schema["$ref"].rsplit("/", 1)[1]], schemas)
    found = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        found |= _properties(part, schemas)
    return found


def _component(name: str) -> dict[str, Any]:
    return openapi_document()["components"]["schemas"][name]


@pytest.fixture
async def anonymous(gateway) -> Any:
    from failover_site.asgi import application

    transport = httpx.ASGITransport(app=handed(application, gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


async def test_the_document_is_served_to_anyone_as_the_code_builds_it(anonymous):
    response = await anonymous.get("/api/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == openapi_document()


async def test_the_document_refuses_other_methods_and_hosts_it_doesnt_serve(anonymous):
    posted = await anonymous.post("/api/openapi.json")
    assert (posted.status_code, posted.headers["allow"]) == (405, "GET")
    elsewhere = await anonymous.get("/api/openapi.json", headers={"host": "evil.example"})
    assert elsewhere.json()["error"]["code"] == "invalid_host"


@pure
def test_the_document_is_valid_openapi_3_1_with_valid_json_schemas():
    document = openapi_document()
    # Schemathesis's own copy of the OpenAPI 3.1 meta-schema (openapi-spec-validator is not
    # among its dependencies any more), then its loader's own checks.
    OPENAPI_31_VALIDATOR.validate(document)
    schemathesis.openapi.from_dict(document).validate()
    for name, schema in document["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name
    operations = {(path, method) for path, item in document["paths"].items() for method in item}
    assert operations == {
        ("/api/v1/complete", "post"),
        ("/v1/chat/completions", "post"),
        ("/v1/responses", "post"),
        ("/v1/embeddings", "post"),
        ("/v1/messages", "post"),
        ("/v1/messages/count_tokens", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/api/v1/status", "get"),
        ("/api/openapi.json", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    }


@pure
def test_the_endpoints_document_every_refusal_they_can_give():
    paths = openapi_document()["paths"]
    routed = set(paths["/v1/chat/completions"]["post"]["responses"])
    assert routed == {
        "200", "400", "401", "403", "404", "405", "408", "413", "415", "422", "429", "503"
    }  # fmt: skip
    assert set(paths["/api/v1/complete"]["post"]["responses"]) == routed - {"404"}
    too_many = paths["/api/v1/complete"]["post"]["responses"]["429"]
    assert too_many["headers"]["Retry-After"]["required"] is True
    answered = paths["/v1/chat/completions"]["post"]["responses"]["200"]
    assert set(answered["content"]) == {"application/json", "text/event-stream"}
    assert {name for name, h in answered["headers"].items() if h["required"]} == {
        "X-Request-Id", "X-Failover-Tier", "X-Failover-Provider"
    }  # fmt: skip


@pure
@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("CompleteRequest", complete_request.COMPLETE_FIELDS),
        ("ChatCompletionRequest", chat_request.CHAT_BODY.all_fields),
    ],
)
def test_the_documented_request_fields_are_the_ones_the_validator_takes(name, fields):
    schema = _component(name)
    assert list(schema["properties"]) == [field.name for field in fields]
    assert schema["required"] == [field.name for field in fields if field.required]
    assert schema["additionalProperties"] is False


# Values of every JSON type, at and past the bounds the tables use.
CANDIDATES = [
    None, True, False, 0, 1, 1.0, 2.0, 1.5, -3, 40_000, "", " ", "x", "auto", "a b",
    [], ["x"], [1], ["", "x"], {}, {"type": "text"}, {"include_usage": True},
    {"include_usage": "yes"}, [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    [{"role": "user", "content": None}], [{"role": "tool", "content": "42"}],
    [{"role": "user", "content": "Hi", "tool_calls": [{"id": "1"}]}],
]  # fmt: skip


def _at_the_bounds(schema: dict[str, Any]) -> list[Any]:
    """Values on and just past each bound the field's schema states."""
    values: list[Any] = []
    for key in ("minimum", "maximum"):
        if key in schema:
            bound = schema[key]
            values += [bound, bound - 0.5, bound + 0.5, bound - 1, bound + 1]
    for key in ("minLength", "maxLength"):
        if key in schema:
            values += ["y" * max(schema[key] + step, 0) for step in (-1, 0, 1)]
    if "maxItems" in schema.get("anyOf", [{}])[-1]:
        most = schema["anyOf"][-1]["maxItems"]
        values += [["y"] * most, ["y"] * (most + 1)]
    return values


BODIES = {
    "CompleteRequest": (complete_request.parse_complete, {"prompt": "Hello"}),
    "ChatCompletionRequest": (
        chat_request.parse_chat,
        {"model": "auto", "messages": [{"role": "user", "content": "Hello"}], "stream": True},
    ),
    "EmbeddingsRequest": (embeddings_request.parse_embeddings, {"model": "auto", "input": "Hi"}),
}


@pure
@pytest.mark.parametrize("name", list(BODIES))
def test_the_schema_and_the_validator_agree_on_every_value_of_every_field(name):
    """One definition drives both: for each field and each value, the body's schema and its
    validator say the same. (Not tried here: the orders a conversation's messages may come in,
    which JSON Schema can't say; the validator's own tests hold those.)"""
    parse, base = BODIES[name]
    schema = jsonschema_rs.Draft202012Validator(_component(name))
    disagreements = []
    for field in [*_component(name)["properties"], "promt"]:
        for value in [*CANDIDATES, *_at_the_bounds(_component(name)["properties"].get(field, {}))]:
            body = {**base, field: value}
            documented = schema.is_valid(body)
            accepted = not isinstance(parse(json.dumps(body).encode()), ApiError)
            if documented != accepted:
                disagreements.append((field, value, f"schema {documented}, code {accepted}"))
    assert disagreements == []
    if name == "ChatCompletionRequest":  # a rule across fields: stream_options with stream only
        without_stream = {**base, "stream": False, "stream_options": {}}
        assert not schema.is_valid(without_stream)
        assert isinstance(parse(json.dumps(without_stream).encode()), ApiError)


@pure
def test_the_chat_request_takes_only_openais_fields_and_the_gateways_own():
    reference = _reference()
    openai_fields = _properties(
        reference["components"]["schemas"]["CreateChatCompletionRequest"],
        reference["components"]["schemas"],
    )
    ours = set(_component("ChatCompletionRequest")["properties"])
    assert ours - openai_fields == GATEWAY_OWN
    assert {f.name for f in validation.ROUTING_FIELDS} - openai_fields == GATEWAY_OWN


async def test_a_completion_and_its_stream_are_answers_in_openais_own_shapes(api, primary):
    reference = _reference()
    messages = [{"role": "user", "content": "Say hello."}]
    whole = await api.post("/v1/chat/completions", json={"model": "auto", "messages": messages})
    assert whole.status_code == 200
    _openai_validator(reference, "CreateChatCompletionResponse").validate(whole.json())
    jsonschema_rs.Draft202012Validator(
        {**COMPONENTS_ROOT, **_component("ChatCompletion")}
    ).validate(whole.json())

    streamed = await api.post(
        "/v1/chat/completions",
        json={
            "model": "auto",
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    theirs = _openai_validator(reference, "CreateChatCompletionStreamResponse")
    for chunk in chunks:
        theirs.validate(chunk)


# Loaded as the code builds it (the served copy is the same: a test above says so). Pytest 9
# no longer has what Schemathesis's fixture-loaded schemas rename their test nodes with.
plain = schemathesis.openapi.from_dict(
    openapi_document(), config=_schemathesis_config(make_up_keys=False)
)
made_up_keys = schemathesis.openapi.from_dict(
    openapi_document(), config=_schemathesis_config(make_up_keys=True)
)
# One platform serves all of an operation's examples (each example is a request; nothing in the
# fixture is spent by one); the chat body is large, and slow to generate.
FUZZ_SETTINGS = hypothesis.settings(
    deadline=None,
    suppress_health_check=[
        hypothesis.HealthCheck.function_scoped_fixture,
        hypothesis.HealthCheck.too_slow,
        hypothesis.HealthCheck.filter_too_much,
        hypothesis.HealthCheck.data_too_large,
    ],
)
# What a caller without a valid key may hear from an endpoint that needs one: the envelope and
# the method are checked first, then the key.
KEYLESS_STATUSES = {400, 401, 405, 408, 413, 415}


def _excluded(case) -> list:
    """Checks that can't hold for an operation. A Chat Completions, Responses or Messages body is
    refused for rules across its messages (or input items or blocks) that JSON Schema can't say
    (the last one is the user's, the question isn't blank, a tool_result answers an earlier
    tool_use, the whole conversation's length, two tools of one name), so schema-valid bodies
    may be 400s. Any prompt body may ask for more (its text and
    its max_tokens) than every provider's context window holds: a 400 context_length_exceeded.
    An embeddings body may name a model no provider here embeds with (a 404)."""
    if case.operation.path in (
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/api/v1/complete",
        "/v1/embeddings",
        "/v1/models/{model}",
    ):
        return [positive_data_acceptance]
    return []


@plain.parametrize()
@FUZZ_SETTINGS
def test_with_a_valid_key_every_answer_is_one_the_document_promises(case, platform_url):
    case.call_and_validate(base_url=platform_url, headers=AUTH, excluded_checks=_excluded(case))


# The operations that need a key; the rest answer the same to everyone (the run above).
keyed = plain.exclude(tag="probes").exclude(operation_id="openapi")
# A refusal before the key is known reaches no state store and no provider: one pass checks it.


@pure
@keyed.parametrize()
@FUZZ_SETTINGS
def test_without_a_key_every_answer_is_a_refusal_the_document_promises(
    case, platform_url, primary, secondary
):
    response = case.call_and_validate(base_url=platform_url, excluded_checks=_excluded(case))
    assert response.status_code in KEYLESS_STATUSES, response.text
    assert primary.calls == secondary.calls == 0


@pure
@made_up_keys.include(path=["/api/v1/complete", "/v1/chat/completions"]).parametrize()
@FUZZ_SETTINGS
def test_with_a_made_up_key_every_answer_is_a_refusal_the_document_promises(
    case, platform_url, primary, secondary
):
    response = case.call_and_validate(base_url=platform_url, excluded_checks=_excluded(case))
    assert response.status_code in KEYLESS_STATUSES, response.text
    assert primary.calls == secondary.calls == 0


async def test_a_stream_is_judged_event_by_event(api, primary):
    """The fuzzer's check of a stream is no formality: the same events with one chunk's
    `object` changed break the document's promise."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    response = await api.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    case = plain["/v1/chat/completions"]["POST"].Case(body=body, media_type="application/json")
    case.validate_response(response, checks=[response_schema_conformance])
    changed = response.content.replace(b'"chat.completion.chunk"', b'"chat.completion"', 1)
    broken = httpx.Response(
        200, headers=response.headers, content=changed, request=response.request
    )
    broken.elapsed = response.elapsed
    with pytest.raises(FailureGroup, match="SSE event violates schema"):
        case.validate_response(broken, checks=[response_schema_conformance])


async def test_a_messages_stream_is_judged_event_by_event(api, primary):
    """The same for Anthropic's events: one delta's type changed breaks the promise."""
    body = {
        "model": "auto",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
    }
    response = await api.post("/v1/messages", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    case = plain["/v1/messages"]["POST"].Case(body=body, media_type="application/json")
    case.validate_response(response, checks=[response_schema_conformance])
    changed = response.content.replace(b'"text_delta"', b'"text_piece"', 1)
    broken = httpx.Response(
        200, headers=response.headers, content=changed, request=response.request
    )
    broken.elapsed = response.elapsed
    with pytest.raises(FailureGroup, match="SSE event payload violates"):
        case.validate_response(broken, checks=[response_schema_conformance])
