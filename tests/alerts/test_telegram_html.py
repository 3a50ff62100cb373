"""Telegram gets its HTML parse mode: every value escaped, only the tags we build, within its
4096 characters; checked on what the fake Telegram receives and parses as Telegram does."""

from __future__ import annotations

import re

import httpx
import pytest

from alerts.channels import channel_for, event_text
from alerts.channels.telegram import MAX_MESSAGE, telegram_html, utf16_len
from alerts.verdicts import VerdictMove, verdict_moved
from providers.models import Provider
from tests.alerts.builders import TELEGRAM_TOKEN, make_event, telegram_channel

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]

DETAIL = 'HTTP 500: <html><body>model_not_loaded & "retry"</body></html>'
RUNBOOK = "\n".join(
    [
        "systemctl status ollama_gpu",
        "journalctl -u ollama_gpu -n 50 | grep -i 'err' > /tmp/x && cat /tmp/x",
    ]
)


@pytest.fixture
def nothing_delivered(monkeypatch):
    monkeypatch.setattr("alerts.dispatch.hand_over", lambda *args, **kwargs: None)


def tags_in(text: str) -> set[str]:
    return set(re.findall(r"</?([a-z]+)>", text))


def test_a_verdict_alert_with_markup_in_its_values_arrives_escaped_and_parsed(
    receiver, nothing_delivered
):
    Provider.objects.create(
        name="ollama_gpu", kind="ollama", base_url="http://127.0.0.1:9", model="m", runbook=RUNBOOK
    )
    event = verdict_moved(
        VerdictMove(
            provider="ollama_gpu",
            status="degraded",
            previous="healthy",
            previous_since=0.0,
            at=1_780_000_000.0,
            window=(True, True, False, False, False),
            detail=DETAIL,
        )
    )
    assert event is not None
    channel_for(telegram_channel(receiver)).send(event.as_alert())

    [received] = receiver.messages
    assert received.status == 200  # it parsed, as Telegram would
    assert received["parse_mode"] == "HTML"
    text = received["text"]
    assert text.startswith(
        "<b>[WARNING] ollama_gpu degraded: 3/5 health checks failed: HTTP 500: "
        '&lt;html&gt;&lt;body&gt;model_not_loaded &amp; "retry"&lt;/body&gt;&lt;/html&gt;</b>'
    )
    assert tags_in(text) == {"b", "pre"}
    assert (
        "<b>Runbook</b>\n<pre>systemctl status ollama_gpu\njournalctl -u ollama_gpu -n 50 | "
        "grep -i 'err' &gt; /tmp/x &amp;&amp; cat /tmp/x</pre>"
    ) in text
    # What the chat shows is what was written.
    assert DETAIL in received.rendered
    assert received.rendered.endswith("Runbook\n" + RUNBOOK)


def test_a_title_that_looks_like_html_is_shown_as_written(receiver):
    event = make_event(title="<b>p95 > 5 s</b> & <i>rising</i>", message="a <pre> & </code>")
    channel_for(telegram_channel(receiver)).send(event.as_alert())
    [received] = receiver.messages
    assert received["text"] == (
        "<b>[CRITICAL] &lt;b&gt;p95 &gt; 5 s&lt;/b&gt; &amp; &lt;i&gt;rising&lt;/i&gt;</b>\n\n"
        "a &lt;pre&gt; &amp; &lt;/code&gt;"
    )
    assert received.rendered == ("[CRITICAL] <b>p95 > 5 s</b> & <i>rising</i>\n\na <pre> & </code>")


def test_a_long_alert_is_cut_within_telegrams_limit_and_keeps_its_runbook(receiver):
    event = make_event(message="<&_" * 3000, data={"runbook": ["systemctl restart ollama"]})
    channel_for(telegram_channel(receiver)).send(event.as_alert())
    [received] = receiver.messages
    assert received.status == 200
    assert utf16_len(received["text"]) <= MAX_MESSAGE
    assert "…\n\n<b>Runbook</b>\n<pre>systemctl restart ollama</pre>" in received["text"]
    assert not re.search(r"&[a-z]*…", received["text"])  # never cut inside an entity


def test_astral_characters_count_twice_as_telegram_counts_them():
    event = make_event(message="🔥" * 3000)
    text = telegram_html(event.as_alert())
    assert utf16_len(text) <= MAX_MESSAGE < len(text) * 2


def test_the_fake_telegram_refuses_markup_it_cannot_parse(receiver):
    url = f"{receiver.telegram_base_url}/bot{TELEGRAM_TOKEN}/sendMessage"
    for text in ("a < b", "<b>open", "<span>x</span>", "R&D"):
        answer = httpx.post(url, json={"chat_id": 1, "text": text, "parse_mode": "HTML"})
        assert answer.status_code == 400, text
        assert answer.json()["description"].startswith("Bad Request: can't parse entities")
    too_long = httpx.post(url, json={"chat_id": 1, "text": "x" * 4097, "parse_mode": "HTML"})
    assert too_long.json()["description"] == "Bad Request: message is too long"
    plain = httpx.post(url, json={"chat_id": 1, "text": "a < b & c"})
    assert plain.status_code == 200


def test_the_other_channels_get_the_runbook_as_plain_lines():
    event = make_event(data={"runbook": ["systemctl status ollama", "ollama ps"]})
    assert event_text(event.as_alert()).endswith(
        "\n\nRunbook:\n  systemctl status ollama\n  ollama ps"
    )
