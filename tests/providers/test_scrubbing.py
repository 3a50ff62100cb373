"""The scrubber: the key in use and anything shaped like a credential leave upstream text, and
the words an operator needs to read stay. Then the seam itself: every adapter's error, whole or
streamed, comes out scrubbed of a key that looks like no credential at all."""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from devtools.fake_provider import FakeProvider
from gateway.adapters import ADAPTERS
from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.engine.config import ProviderConfig
from gateway.engine.scrub import REDACTED, scrub, scrub_cut, scrubbed_traceback
from providers.models.secret_env import secret_values

pytestmark = pytest.mark.backend_free

# A key in no known shape (no sk- prefix, too short to look random): only the key in use
# catches it, which is what these tests are about.
PLAIN_KEY = "correct-horse-battery-staple"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.DEF-123_xyz", "Authorization: Bearer [redacted]"),
        ("Basic dXNlcjpwYXNzd29yZA==", "Basic [redacted]"),
        (
            "Incorrect API key provided: sk-proj-a1b2c3d4e5.",
            "Incorrect API key provided: [redacted].",
        ),
        ("invalid x-api-key sk-ant-api03-Zz9Yy8Xx7", "invalid x-api-key [redacted]"),
        ("GET /v1/models?api_key=abcd1234&page=2", "GET /v1/models?api_key=[redacted]&page=2"),
        ("retry with token=hunter22, then", "retry with token=[redacted], then"),
        ('{"x-api-key": "opaque-value-1"}', '{"x-api-key": "[redacted]"}'),
        ("password: hunter22", "password: [redacted]"),
        ("request ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 refused", "request [redacted] refused"),
    ],
)
def test_it_redacts_what_looks_like_a_credential(text, expected):
    assert scrub(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens.",
        "The model `gpt-4o-mini` does not exist or you do not have access to it.",
        "Incorrect API key provided. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "prompt is too long: 8193 tokens > 8192 maximum",
        "The bearer token is invalid",
        "ConnectError: [Errno 111] Connection refused",
        "no answer within 5.00 s",
        "error event: Overloaded overloaded_error",
    ],
)
def test_it_leaves_an_operators_words_alone(text):
    assert scrub(text) == text


def test_the_key_in_use_goes_wherever_it_is_even_in_no_known_shape():
    text = f"denied ({PLAIN_KEY}); you sent {PLAIN_KEY}!"
    assert scrub(text, [PLAIN_KEY]) == f"denied ({REDACTED}); you sent {REDACTED}!"
    assert PLAIN_KEY in scrub(text)  # the proof that only the key in use caught it


def test_a_key_too_short_to_look_for_is_not_replaced_everywhere():
    assert scrub("a bad request", ["a"]) == "a bad request"


def test_scrubbing_twice_changes_nothing_more():
    once = scrub(f"api_key={PLAIN_KEY} Bearer {PLAIN_KEY}", [PLAIN_KEY])
    assert scrub(once, [PLAIN_KEY]) == once == "api_key=[redacted] Bearer [redacted]"


# A key in pieces: halves, spaced, punctuated, encoded ---------------------------------------

KEY = "q8Zr2LmX9vBt4NwK+7yHc3JpD/6sFa1GeU"  # no known shape, with what URL-encoding changes


@pytest.mark.parametrize(
    ("shape", "written"),
    [
        ("its first half", KEY[:17]),
        ("its last half", KEY[17:]),
        ("a run of eight from its middle", KEY[8:16]),
        ("split by spaces", " ".join(KEY[i : i + 3] for i in range(0, len(KEY), 3))),
        ("split by punctuation", "-".join(KEY[i : i + 5] for i in range(0, len(KEY), 5))),
        ("one character a line", "\n".join(KEY)),
        ("URL-encoded", quote(KEY, safe="")),
        ("in base64", base64.b64encode(KEY.encode()).decode()),
        ("in base64 behind Bearer", base64.b64encode(f"Bearer {KEY}".encode()).decode()),
        ("in base64 as a Basic pair", base64.b64encode(f"user:{KEY}".encode()).decode()),
        ("in URL-safe base64", base64.urlsafe_b64encode(f"xx{KEY}".encode()).decode()),
    ],
)
def test_any_eight_characters_of_a_secret_go_however_they_are_written(shape, written):
    scrubbed = scrub(f"the upstream said: {written} (refused)", [KEY])
    assert REDACTED in scrubbed, shape
    assert scrubbed.startswith("the upstream said: ") and scrubbed.endswith(" (refused)")
    folded = re.sub(r"[^A-Za-z0-9]", "", scrubbed)
    for forms in (KEY, quote(KEY, safe="")):
        pieces = re.sub(r"[^A-Za-z0-9]", "", forms)
        assert not any(pieces[i : i + 8] in folded for i in range(len(pieces) - 7)), shape


def test_fewer_than_eight_characters_of_a_secret_are_words_not_a_leak():
    text = f"model {KEY[:7]} is loading"
    assert scrub(text, [KEY]) == text


def test_a_secret_url_goes_past_its_host_and_the_host_stays_readable():
    webhook = "https://hooks.slack.com/services/T0AB12CD/B0EF34GH/abcdefghijklmnopqrstuvwx"
    said = scrub("posting to https://hooks.slack.com/services/T0AB12CD/… failed", [webhook])
    assert said == f"posting to https://hooks.slack.com/{REDACTED}/… failed"


def test_kept_text_is_capped_after_scrubbing_so_the_cap_cuts_no_secret_in_half():
    text = "x " * 200 + KEY + " y" * 2000
    cut = scrub_cut(text, 450, [KEY])
    assert len(cut) == 450 and KEY[:8] not in cut and REDACTED in cut


# The seam: what each adapter raises ---------------------------------------------------------

MODELS = {"ollama": "llama3.1:8b", "openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku"}


def config(kind: str, url: str) -> ProviderConfig:
    return ProviderConfig(
        name=f"{kind}-test",
        kind=kind,
        base_url=url,
        model=MODELS[kind],
        priority=10,
        is_local=False,
        timeout_s=5.0,
        context_window=8192,
        api_key=PLAIN_KEY,
    )


async def failure(kind: str, fake: FakeProvider, *, stream: bool) -> ProviderError:
    async with httpx.AsyncClient() as client:
        adapter = ADAPTERS[kind](config(kind, fake.url), client)
        request = CompletionRequest(prompt="Say hello.")
        with pytest.raises(ProviderError) as caught:
            if stream:
                answer: Any = await adapter.stream(request, timeout=5, first_token_timeout=5)
                async for _ in answer.rest():
                    pass
            else:
                await adapter.complete(request, timeout=5)
    return caught.value


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["unauthorized", "bad_request", "error"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_error_body_quoting_the_key_is_raised_scrubbed(kind, mode, stream):
    with FakeProvider(models=[MODELS[kind]], api_key=PLAIN_KEY, echo_key=True) as fake:
        fake.set_fault(mode=mode)
        error = await failure(kind, fake, stream=stream)
    assert "the request carried" in error.message  # the fake did quote it
    assert PLAIN_KEY not in error.message and REDACTED in error.message


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_streams_error_event_quoting_the_key_is_raised_scrubbed(kind):
    with FakeProvider(models=[MODELS[kind]], api_key=PLAIN_KEY, echo_key=True) as fake:
        fake.set_fault(mode="stream_error")
        error = await failure(kind, fake, stream=True)
    assert error.message.startswith("error event: The model crashed mid-answer.")
    assert PLAIN_KEY not in error.message and REDACTED in error.message


@pytest.mark.backend_free
def test_a_cut_through_a_key_takes_the_keys_kept_half_with_it():
    key = "q8Zr2LmX9vBt4NwK7yHc3JpD6sFa1GeU"  # no known shape: only whole is it recognised
    text = "x " * 4090 + "token " + key + " more"
    cut = scrub_cut(text, 9000, head=8192)
    assert key[:6] not in cut
    assert cut.endswith("token ")


@pytest.mark.backend_free
def test_a_logged_traceback_is_scrubbed_of_the_key_and_credentials():
    try:
        raise ValueError("upstream said: invalid key sk-canary-123456 for Bearer abcdef12345")
    except ValueError as exc:
        logged = scrubbed_traceback(exc, ("sk-canary-123456",))
    assert "sk-canary" not in logged and "abcdef12345" not in logged
    assert "ValueError" in logged and "Traceback" in logged


def test_every_secret_the_process_can_send_leaves_any_providers_words(monkeypatch, settings):
    token, other = "7251849302:AAF-a-bot-token-in-pieces-9Q2x", "the-vllm-key-of-another-row"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", token)
    monkeypatch.setenv("FAILOVER_SECRET_VLLM_KEY", other)
    monkeypatch.setenv("SECRET_KEY", "the-servers-own-secret-key-never-sent-anywhere")
    settings.EMAIL_HOST_PASSWORD = "smtp-password-0451"
    held = secret_values()
    assert {token, other, "smtp-password-0451"} <= set(held)
    assert "the-servers-own-secret-key-never-sent-anywhere" not in held  # never sendable

    adapter = ADAPTERS["openai"](
        replace(config("openai", "http://127.0.0.1:9"), other_secrets=held), httpx.AsyncClient()
    )
    error = adapter.failures.malformed(
        f"echo {token[:14]} / {other} / smtp-password-0451 / {PLAIN_KEY}"
    )
    assert error.message == (
        f"unexpected answer: echo {REDACTED} / {REDACTED} / {REDACTED} / {REDACTED}"
    )
