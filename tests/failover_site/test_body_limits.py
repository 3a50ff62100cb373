# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""Request body limits per endpoint (BODY_LIMIT_*_BYTES): a long agent conversation or a full
embeddings batch gets through, one byte over an endpoint's limit is a 413 naming it (with a
Content-Length, refused before reading; chunked, as it arrives), the frontends' /api/ keeps its
small limit, and the admin keeps DATA_UPLOAD_MAX_MEMORY_SIZE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from django.conf import settings
from django.test import RequestFactory, override_settings

from edge.api.arrival import body_limit_for, body_of, byte_size, checked_envelope
from edge.api.openapi import openapi_document
from providers.models import Provider
from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    api,
    clock,
    gateway,
    live_url,
    primary,
    providers_configured,
    secondary,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
EMBEDDING_MODEL = "nomic-embed-text"
# Each endpoint: its smallest valid body, its setting, its default, and how the 413 reads.
ENDPOINTS = {
    "/v1/chat/completions": (
        {"model": "auto", "messages": [{"role": "user", "content": "Say hello."}]},
        "BODY_LIMIT_CHAT_BYTES",
        "4194304 bytes (4 MiB)",
    ),
    "/v1/responses": (
        {"model": "auto", "input": "Say hello."},
        "BODY_LIMIT_CHAT_BYTES",
        "4194304 bytes (4 MiB)",
    ),
    "/v1/embeddings": (
        {"model": "auto", "input": "hello"},
        "BODY_LIMIT_EMBEDDINGS_BYTES",
        "4194304 bytes (4 MiB)",
    ),
    "/api/v1/complete": ({"prompt": "Say hello."}, "BODY_LIMIT_API_BYTES", "65536 bytes (64 KiB)"),
}


@pytest.fixture
def roomy(providers_configured, primary) -> None:
    """Long-context models (a 200 KB conversation is ~50k tokens), and an Ollama that embeds."""
    primary.set_fault(embedding_models=[EMBEDDING_MODEL])
    Provider.objects.update(context_window=200_000)
    Provider.objects.filter(name="ollama-local").update(embedding_models=EMBEDDING_MODEL)


def padded(body: dict[str, Any], size: int) -> bytes:
    """`body` as JSON grown to exactly `size` bytes with trailing white space (still valid)."""
    raw = json.dumps(body).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def pieces(data: bytes, size: int = 65_536) -> AsyncIterator[bytes]:
    """The body as a stream of unknown length: sent chunked, with no Content-Length."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def assert_refused(response: httpx.Response, path: str, limit_text: str) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["connection"] == "close"
    error = response.json()["error"]
    assert error["code"] == "body_too_large"
    assert error["message"] == f"The body may be at most {limit_text} on {path}."
    if path.startswith("/v1/"):  # OpenAI's shape
        assert (error["type"], error["param"]) == ("invalid_request_error", None)
    else:  # the gateway's own
        assert set(error) == {"code", "message"}


def agent_conversation(size: int) -> dict[str, Any]:
    """A coding agent's request of about `size` bytes: 48 tools with full JSON Schemas, and a
    history of tool calls and their results."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"workspace_tool_{n}",
                "description": f"Tool {n} of the workspace: " + "reads or edits files. " * 40,
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"argument_{a}": {
                            "type": "string",
                            "description": f"Argument {a}: " + "a path or a pattern. " * 10,
                        }
                        for a in range(8)
                    },
                    "required": ["argument_0"],
                },
            },
        }
        for n in range(48)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. " * 20},
        {"role": "user", "content": "Find why the build fails and fix it."},
    ]
    n = 0
    while len(json.dumps({"tools": tools, "messages": messages})) < size:
        call = {"id": f"call_{n}", "type": "function"}
        call["function"] = {"name": "workspace_tool_1", "arguments": '{"argument_0": "src/"}'}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        source = "def handler(request):\n    return render(request, 'page.html')\n" * 30
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": source})
        n += 1
    messages.append({"role": "user", "content": "Go on."})
    return {"model": "auto", "tools": tools, "messages": messages}


# Through the official SDK ----------------------------------------------------------------


async def test_a_200_kb_agent_conversation_through_the_sdk_is_answered(roomy, live_url, primary):
    body = agent_conversation(200_000)
    assert len(json.dumps(body)) >= 200_000  # past the old 64 KiB fourfold
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    ) as client:
        raw = await client.chat.completions.with_raw_response.create(**body)
    assert raw.status_code == 200
    assert raw.parse().choices[0].finish_reason in ("stop", "tool_calls")
    sent = primary.last_request("/api/chat")["body"]
    assert len(sent["tools"]) == 48 and len(sent["messages"]) == len(body["messages"])


async def test_a_200_kb_chat_of_300_messages_through_langchain_is_answered(
    roomy, live_url, primary
):
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    turn = "The deploy failed after the migration; the pool timed out and every worker retried. "
    history: list[Any] = []
    for n in range(150):
        history.append(HumanMessage(f"{n}: " + turn * 8))
        history.append(AIMessage(f"{n}: noted. " + turn * 8))
    history.append(HumanMessage("So what do we change first?"))
    assert sum(len(m.content) for m in history) > 200_000  # text, not schemas
    chat = ChatOpenAI(
        model="auto", base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )
    answer = await chat.ainvoke(history)
    assert answer.content
    assert len(primary.last_request("/api/chat")["body"]["messages"]) == 301


async def test_a_conversation_past_every_context_window_is_a_400_naming_it(
    providers_configured, live_url, primary, secondary
):
    # The suite's providers keep their default windows, far under a 1 MB conversation's.
    messages = [{"role": "user", "content": "word " * 200_000}]
    async with openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    ) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="auto", messages=messages)
    assert caught.value.code == "context_length_exceeded"
    assert (primary.calls, secondary.calls) == (0, 0)


# One byte over each endpoint's limit -----------------------------------------------------


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_one_byte_over_the_limit_with_a_length_is_a_413_naming_it(api, primary, path):
    body, setting, limit_text = ENDPOINTS[path]
    over = padded(body, getattr(settings, setting) + 1)
    response = await api.post(path, content=over, headers={"content-type": "application/json"})
    assert_refused(response, path, limit_text)
    assert primary.calls == 0


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_one_byte_over_the_limit_chunked_is_a_413_naming_it(api, primary, path):
    body, setting, limit_text = ENDPOINTS[path]
    over = padded(body, getattr(settings, setting) + 1)
    headers = {"content-type": "application/json"}
    response = await api.post(path, content=pieces(over), headers=headers)
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in response.request.headers
    assert_refused(response, path, limit_text)
    assert primary.calls == 0


@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_a_body_of_exactly_the_limit_is_answered(roomy, api, primary, path, chunked):
    body, setting, _ = ENDPOINTS[path]
    exact = padded(body, getattr(settings, setting))
    content = pieces(exact) if chunked else exact
    response = await api.post(path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert primary.calls == 1


async def test_a_chunked_body_over_the_limit_is_cut_off_on_a_real_socket(live_url, primary):
    url = live_url + "/v1/chat/completions"
    body = ENDPOINTS["/v1/chat/completions"][0]
    with override_settings(BODY_LIMIT_CHAT_BYTES=8192):
        async with httpx.AsyncClient(headers=AUTH, timeout=10) as client:
            response = await client.post(
                url,
                content=pieces(padded(body, 8193), 1000),
                headers={"content-type": "application/json"},
            )
            answered = await client.post(url, content=pieces(padded(body, 8192), 1000), headers={
                "content-type": "application/json"})  # fmt: skip
    assert_refused(response, "/v1/chat/completions", "8192 bytes (8 KiB)")
    assert answered.status_code == 200, answered.text


# The limits follow the settings -----------------------------------------------------------


async def test_each_limit_follows_its_setting_and_only_its_endpoints(api, primary):
    headers = {"content-type": "application/json"}
    chat, _, _ = ENDPOINTS["/v1/chat/completions"]
    with override_settings(
        BODY_LIMIT_CHAT_BYTES=2048, BODY_LIMIT_EMBEDDINGS_BYTES=3072, BODY_LIMIT_API_BYTES=1536
    ):
        assert [body_limit_for(path) for path in ENDPOINTS] == [2048, 2048, 3072, 1536]
        over = await api.post("/v1/responses", content=padded(chat, 2049), headers=headers)
        assert_refused(over, "/v1/responses", "2048 bytes (2 KiB)")
        fits = await api.post("/v1/chat/completions", content=padded(chat, 2048), headers=headers)
        assert fits.status_code == 200, fits.text
        small = await api.post("/api/v1/complete", content=padded({}, 1537), headers=headers)
        assert_refused(small, "/api/v1/complete", "1536 bytes (1.5 KiB)")
    again = await api.post("/v1/chat/completions", content=padded(chat, 4096), headers=headers)
    assert again.status_code == 200, again.text


def _limits(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    show = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.BODY_LIMIT_CHAT_BYTES, s.BODY_LIMIT_EMBEDDINGS_BYTES, "
        "s.BODY_LIMIT_API_BYTES, s.DATA_UPLOAD_MAX_MEMORY_SIZE]))"
    )
    clean = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ENV_FILE": "",
        "DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "failover_site.settings",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", show],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.backend_free
def test_the_limits_default_to_4_mib_4_mib_and_64_kib_and_read_the_environment(tmp_path):
    assert json.loads(_limits(tmp_path).stdout) == [4 * MiB, 4 * MiB, 64 * 1024, MiB]
    changed = _limits(tmp_path, BODY_LIMIT_CHAT_BYTES="16777216", BODY_LIMIT_API_BYTES="2048")
    assert json.loads(changed.stdout) == [16 * MiB, 4 * MiB, 2048, MiB]


@pytest.mark.backend_free
@pytest.mark.parametrize("value", ["1023", "0", "-5", "abc", "4MiB", "1e6", ""])
@pytest.mark.parametrize(
    "name", ["BODY_LIMIT_CHAT_BYTES", "BODY_LIMIT_EMBEDDINGS_BYTES", "BODY_LIMIT_API_BYTES"]
)
def test_a_limit_below_1_kib_or_not_a_whole_number_fails_loudly(tmp_path, name, value):
    result = _limits(tmp_path, **{name: value})
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {name} must be a whole number of bytes" in result.stderr


# /api/ stays small; the admin keeps its cap ------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/complete", "/api/v1/status", "/api/nope", "/v1/models"])
async def test_a_body_the_chat_endpoints_take_is_too_large_for_the_small_endpoints(api, path):
    body = padded({"prompt": "Say hello."}, 100_000)
    response = await api.post(path, content=body, headers={"content-type": "application/json"})
    assert_refused(response, path, "65536 bytes (64 KiB)")


async def test_a_body_past_the_pages_cap_reaches_the_embeddings_view(roomy, api, primary):
    batch = {"model": "auto", "input": [f"passage {n}: " + "text " * 200 for n in range(2048)]}
    raw = json.dumps(batch).encode()
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < len(raw) < settings.BODY_LIMIT_EMBEDDINGS_BYTES
    response = await api.post(
        "/v1/embeddings", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 2048


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_the_admin_keeps_the_pages_cap(api, chunked):
    assert MiB == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    over = b"a" * (MiB + 1)
    headers = {"content-type": "application/x-www-form-urlencoded"}
    response = await api.post(
        "/admin/login/", content=pieces(over) if chunked else over, headers=headers
    )
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "The request body may be at most 1048576 bytes.\n"
    # Past the API's small limit but within the pages' cap: the log-in page's own answer.
    within = await api.post("/admin/login/", content=b"a" * 100_000, headers=headers)
    assert within.status_code != 413


# One rule, wherever the request comes from -----------------------------------------------


def test_a_request_built_another_way_is_held_to_its_paths_limit_too():
    factory = RequestFactory()
    limit = settings.BODY_LIMIT_API_BYTES
    declared = factory.post("/api/v1/complete", b"x" * (limit + 1), content_type="application/json")
    refusal = checked_envelope(declared)
    assert refusal is not None and "65536 bytes (64 KiB)" in refusal.message
    assert body_of(declared) == refusal  # read to one byte past the limit, refused
    chat = factory.post("/v1/chat/completions", b"x" * (2 * MiB), content_type="application/json")
    assert checked_envelope(chat) is None
    assert body_of(chat) == b"x" * (2 * MiB)  # past DATA_UPLOAD_MAX_MEMORY_SIZE, still read


@pytest.mark.parametrize(
    ("count", "text"),
    [(4 * MiB, "4 MiB"), (65_536, "64 KiB"), (1536, "1.5 KiB"), (1000, "1000 bytes")],
)
def test_a_limit_is_named_as_people_write_it(count, text):
    assert byte_size(count) == text


def test_the_openapi_document_gives_each_endpoints_413_its_own_limit():
    def described(path: str, method: str = "post") -> str:
        return openapi_document()["paths"][path][method]["responses"]["413"]["description"]

    for path, (_, _, limit_text) in ENDPOINTS.items():
        assert described(path).startswith(f"The body is over {limit_text},")
    assert described("/v1/models", "get").startswith("The body is over 65536 bytes (64 KiB),")
    openapi_document.cache_clear()
    try:
        with override_settings(BODY_LIMIT_CHAT_BYTES=8 * MiB):
            assert described("/v1/chat/completions").startswith(
                "The body is over 8388608 bytes (8 MiB),"
            )
    finally:
        openapi_document.cache_clear()
