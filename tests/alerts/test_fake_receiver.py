"""The fake receiver itself: its routes, its modes and their countdown."""

from __future__ import annotations

import httpx
import pytest

from devtools.fake_receiver import FakeReceiver

# Touches neither the database nor the shared state: the services pass leaves it out.
pytestmark = pytest.mark.backend_free


def test_an_unknown_path_is_answered_404(receiver):
    assert httpx.post(f"{receiver.url}/elsewhere", json={}).status_code == 404


def test_a_mode_set_for_n_requests_returns_to_ok_after_them(receiver):
    receiver.set_mode("error", times=2)
    statuses = [httpx.post(f"{receiver.url}/hook/x", json={}).status_code for _ in range(3)]
    assert statuses == [500, 500, 200]
    assert [m.status for m in receiver.messages] == statuses


def test_telegram_answers_like_the_bot_api(receiver):
    url = f"{receiver.url}/bot123:abc/sendMessage"
    ok = httpx.post(url, json={"chat_id": 7, "text": "hello"}).json()
    assert ok["ok"] is True and ok["result"]["chat"]["id"] == 7
    empty = httpx.post(url, json={"chat_id": 7, "text": ""})
    assert empty.status_code == 400 and empty.json()["error_code"] == 400
    receiver.set_mode("unauthorized")
    assert httpx.post(url, json={"chat_id": 7, "text": "hi"}).json() == {
        "ok": False,
        "error_code": 401,
        "description": "Unauthorized",
    }


def test_a_hook_with_a_secret_refuses_a_bad_signature():
    with FakeReceiver(hook_secret="s") as strict:
        response = httpx.post(
            f"{strict.url}/hook/x", content=b"{}", headers={"X-Failover-Signature": "sha256=0"}
        )
    assert response.status_code == 401


def test_an_unknown_mode_is_refused(receiver):
    with pytest.raises(ValueError, match="unknown mode"):
        receiver.set_mode("sideways")
