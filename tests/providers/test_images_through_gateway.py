"""Images in, on every door: Anthropic's image blocks (also inside a tool's result), OpenAI's
image_url parts and the Responses API's input_image, carried to each dialect in its own shape
and checked byte for byte at the fake provider (which answers each image's size and digest);
a provider whose model reads no images is passed over with its reason, and with none left the
client app's stand-ins decide."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest
from asgiref.sync import sync_to_async

from devtools.fake_provider.images import png
from providers.models import Provider
from tests.factories import AUTH, TEST_CLIENT_KEY
from tests.providers.conftest import ledger_rows, serve_asgi, update_client_app

pytestmark = pytest.mark.django_db(transaction=True)

PICTURE = png(7, width=3, height=2)
B64 = base64.b64encode(PICTURE).decode()
DATA_URL = f"data:image/png;base64,{B64}"
SEEN = f"image 1: {len(PICTURE)} bytes sha256 {hashlib.sha256(PICTURE).hexdigest()}"
ANTHROPIC_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": B64}}  # fmt: skip
READ = {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {}}}}


async def reads_images(*names: str, on: bool = True) -> None:
    await sync_to_async(Provider.objects.filter(name__in=names).update)(supports_images=on)


@pytest.fixture
async def both_read(gateway, primary, secondary):
    await reads_images("ollama-local", "openai-cloud")
    await gateway.snapshots.refresh()


@pytest.fixture
async def only_the_cloud_reads(gateway, primary, secondary):
    await reads_images("openai-cloud")
    await gateway.snapshots.refresh()


@pytest.fixture
def claude_reads(anthropic_only) -> Provider:
    Provider.objects.filter(name="anthropic-cloud").update(supports_images=True)
    return anthropic_only


def claude_sdk(live_url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=live_url, api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


def openai_sdk(live_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=live_url + "/v1", api_key=TEST_CLIENT_KEY, max_retries=0, timeout=30
    )


async def test_an_anthropic_image_block_reaches_ollama_as_its_bytes(live_url, both_read, primary):
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=200,
            messages=[{"role": "user", "content": [ANTHROPIC_IMAGE,
                                                   {"type": "text", "text": "What is this?"}]}],
        )  # fmt: skip
    assert message.content[0].text == SEEN
    [sent] = primary.last_request("/api/chat")["body"]["messages"]
    assert sent["images"] == [B64] and sent["content"] == "What is this?"


async def test_an_image_inside_a_tool_result_reaches_claude_in_a_tool_result(
    claude_reads, live_url, claude
):
    """What Claude Code sends after reading a PNG: the image inside the tool's result."""
    conversation = [
        {"role": "user", "content": "Read the picture."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [ANTHROPIC_IMAGE]}]},
    ]  # fmt: skip
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto", max_tokens=200, messages=conversation, tools=[READ]
        )
    assert message.content[0].text == SEEN
    result = claude.last_request("/v1/messages")["body"]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"] == [ANTHROPIC_IMAGE]


async def test_a_tool_results_image_reaches_an_openai_provider_as_a_user_message_after_it(
    live_url, gateway, only_the_cloud_reads, secondary
):
    conversation = [
        {"role": "user", "content": "Read the picture."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "a.png:"},
                                                  ANTHROPIC_IMAGE]}]},
    ]  # fmt: skip
    async with claude_sdk(live_url) as client:
        message = await client.messages.create(
            model="auto",
            max_tokens=200,
            messages=conversation,
            tools=[READ],
            tool_choice={"type": "none"},  # the images come last: no call to make of them
        )
    assert message.content[0].text == SEEN
    *_, tool, shown = secondary.last_request("/v1/chat/completions")["body"]["messages"]
    assert (tool["role"], tool["content"]) == ("tool", "a.png:")
    assert shown["role"] == "user"
    assert shown["content"][1] == {"type": "image_url", "image_url": {"url": DATA_URL}}


async def test_an_openai_image_url_part_reaches_an_openai_provider_and_ollama(
    live_url, gateway, both_read, primary, secondary
):
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": DATA_URL}}]  # fmt: skip
    async with openai_sdk(live_url) as client:
        answer = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": parts}]
        )
        assert answer.choices[0].message.content == SEEN
        assert primary.last_request("/api/chat")["body"]["messages"][0]["images"] == [B64]
        answer = await client.chat.completions.create(
            model="openai-cloud", messages=[{"role": "user", "content": parts}]
        )
    assert answer.choices[0].message.content == SEEN
    sent = secondary.last_request("/v1/chat/completions")["body"]["messages"][0]["content"]
    assert sent == parts


async def test_a_responses_input_image_reaches_the_provider(live_url, both_read, primary):
    async with openai_sdk(live_url) as client:
        response = await client.responses.create(
            model="auto",
            input=[{"role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]}],
        )  # fmt: skip
    assert response.output_text == SEEN
    assert primary.last_request("/api/chat")["body"]["messages"][0]["images"] == [B64]


async def test_a_provider_that_reads_no_images_is_passed_over_with_its_reason(
    live_url, gateway, only_the_cloud_reads, primary, secondary
):
    async with claude_sdk(live_url) as client:
        raw = await client.messages.with_raw_response.create(
            model="auto", max_tokens=200,
            messages=[{"role": "user", "content": [ANTHROPIC_IMAGE]}],
        )  # fmt: skip
    assert raw.parse().content[0].text == SEEN
    assert raw.headers["X-Failover-Provider"] == "openai-cloud"
    assert primary.calls == 0
    [record] = await ledger_rows(gateway, at_least=1)
    skipped = record.attempts[0]
    assert (skipped["provider"], skipped["outcome"]) == ("ollama-local", "skipped")
    assert skipped["detail"] == "images: its settings say its model reads no images"


async def test_with_no_provider_reading_images_the_apps_stand_ins_decide(
    live_url, gateway, primary, secondary
):
    body = {"model": "auto", "max_tokens": 200,
            "messages": [{"role": "user", "content": [ANTHROPIC_IMAGE]}]}  # fmt: skip
    headers = {"x-api-key": TEST_CLIENT_KEY}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        stood_in = await http.post(live_url + "/v1/messages", json=body)
        await update_client_app(gateway, "suite", accept_cached=False, accept_static=False,
                                accept_degraded=False)  # fmt: skip
        refused = await http.post(live_url + "/v1/messages", json=body)
    assert stood_in.status_code == 200
    assert stood_in.headers["X-Failover-Stand-In"] in ("static", "degraded")
    assert refused.status_code == 400
    assert "No provider here reads images" in refused.json()["error"]["message"]
    assert primary.calls == 0 and secondary.calls == 0


@pytest.fixture
def image_server() -> Iterator[str]:
    """A loopback server of images: /cat.png (PICTURE), /big.png (past the test's cap),
    /page.html (not an image)."""
    bodies = {
        "/cat.png": (b"image/png", PICTURE),
        "/big.png": (b"image/png", bytes(range(256)) * 80),  # 20,480 bytes, past the cap
        "/page.html": (b"text/html", b"<p>no</p>"),
    }

    async def app(scope, receive, send) -> None:
        kind, body = bodies.get(scope["path"], (b"text/plain", b""))
        status = 200 if scope["path"] in bodies else 404
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def nothing() -> None:
        return None

    with serve_asgi(app, nothing) as url:
        yield url


@pytest.fixture
def fetch_from_loopback(settings):
    """Images may be fetched from this machine (a deployment's default is public addresses
    only); made before the test's gateway reads it."""
    settings.IMAGE_FETCH_ALLOW = ["loopback"]
    settings.BODY_LIMIT_CHAT_BYTES = 10_000  # an image fetched is held to the body limit


def url_image(url: str) -> list[dict]:
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return [{"role": "user", "content": parts}]


async def test_an_image_by_url_is_fetched_for_ollama_and_reaches_it_as_its_bytes(
    image_server, fetch_from_loopback, live_url, both_read, primary
):
    async with openai_sdk(live_url) as client:
        answer = await client.chat.completions.create(
            model="auto", messages=url_image(image_server + "/cat.png")
        )
    assert answer.choices[0].message.content == SEEN
    assert primary.last_request("/api/chat")["body"]["messages"][0]["images"] == [B64]


@pytest.mark.parametrize(
    ("path", "why"),
    [("/big.png", "larger than 10000 bytes"), ("/page.html", "not an image a provider reads")],
)
async def test_an_image_past_the_cap_or_not_an_image_passes_ollama_over(
    image_server, fetch_from_loopback, live_url, gateway, both_read, primary, secondary, path, why
):
    url = image_server + path
    async with openai_sdk(live_url) as client:
        answer = await client.chat.completions.with_raw_response.create(
            model="auto", messages=url_image(url)
        )
    assert answer.parse().choices[0].message.content == f"image 1: url {url}"
    assert answer.headers["X-Failover-Provider"] == "openai-cloud"
    assert primary.calls == 0
    [record] = await ledger_rows(gateway, at_least=1)
    assert why in record.attempts[0]["detail"]


async def test_an_image_url_inside_the_network_is_never_fetched_by_default(
    image_server, live_url, gateway, both_read, primary, secondary
):
    """The providers' URL policy allows loopback here (an Ollama on this machine); an image's
    URL is held to its own, which allows only public addresses."""
    url = image_server + "/cat.png"
    async with openai_sdk(live_url) as client:
        answer = await client.chat.completions.with_raw_response.create(
            model="auto", messages=url_image(url)
        )
    assert answer.parse().choices[0].message.content == f"image 1: url {url}"
    assert answer.headers["X-Failover-Provider"] == "openai-cloud"
    assert primary.calls == 0
    [record] = await ledger_rows(gateway, at_least=1)
    assert "blocked by the URL policy" in record.attempts[0]["detail"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
        ("/v1/responses", {"model": "auto", "input": [{"role": "user", "content": [
            {"type": "input_file", "file_id": "file_1"}]}]}),
    ],
)  # fmt: skip
async def test_both_openai_doors_refuse_an_unsupported_part_with_one_code(api, primary, path, body):
    response = await api.post(path, json=body, headers=AUTH)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_content"
    assert error["param"].endswith("content[0]")


async def test_an_image_that_isnt_one_is_a_400_naming_where(api, primary):
    response = await api.post(
        "/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}]},
    )  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content[0].image_url.url"
