"""CORS as a browser meets it (real Chromium, preflight and all): a page on an origin its client
app allows calls the API and reads the answer and the failover headers; a page on another
origin is stopped by the browser before its request is sent; a page on an origin that some
other app allows gets its request through the preflight and refused by the gateway."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from providers.services.client_apps import client_app_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGE = b"<!doctype html><title>shop</title><p>A frontend on its own origin.</p>"

CALL = """async ([url, key]) => {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify({prompt: "What are your opening hours?"}),
    });
    return {
      status: response.status,
      tier: response.headers.get("X-Failover-Tier"),
      body: await response.json(),
    };
  } catch (error) {
    return {blocked: String(error)};
  }
}"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origins() -> Iterator[tuple[str, str, str]]:
    """Three frontends, each on an origin of its own (a port each)."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(3)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _preflight_allows(url: str, origin: str) -> bool:
    response = httpx.options(
        url,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    return response.headers.get("access-control-allow-origin") == origin


def _until_served(url: str, origin: str) -> None:
    """Until the serving process has the new apps (its snapshot is rebuilt in the background)."""
    deadline = time.monotonic() + 5
    while not _preflight_allows(url, origin):
        assert time.monotonic() < deadline, "the new client app never reached the server"
        time.sleep(0.05)


def test_a_browser_calls_from_an_allowed_origin_and_is_stopped_from_any_other(
    page, platform_url, origins, primary
):
    shop, elsewhere, partner = origins
    _, key = client_app_create(actor=None, name="shop-web", allowed_origins=shop)
    client_app_create(actor=None, name="partner-web", allowed_origins=partner)
    api = f"{platform_url}/api/v1/complete"
    _until_served(api, shop)
    _until_served(api, partner)
    calls = primary.calls

    page.goto(shop)
    answered = page.evaluate(CALL, [api, key])
    assert answered["status"] == 200, answered
    assert answered["tier"] == "primary"  # an exposed header the page may read
    assert answered["body"]["provider"] == "ollama-local"
    assert primary.calls == calls + 1

    page.goto(elsewhere)
    refused = page.evaluate(CALL, [api, key])
    assert "blocked" in refused  # the preflight named no origin: the browser sent nothing
    assert primary.calls == calls + 1

    page.goto(partner)  # allowed by another app, not by this key's
    forbidden = page.evaluate(CALL, [api, key])
    assert forbidden["status"] == 403
    assert forbidden["body"]["error"]["code"] == "origin_not_allowed"
    assert primary.calls == calls + 1


def test_the_openai_endpoint_answers_a_browsers_preflight_with_what_an_sdk_sends(
    platform_url, origins
):
    shop = origins[0]
    client_app_create(actor=None, name="shop-web", allowed_origins=shop)
    url = f"{platform_url}/v1/chat/completions"
    _until_served(url, shop)
    response = httpx.options(
        url,
        headers={
            "Origin": shop,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
        },
    )
    assert response.status_code == 200
    allowed = {
        h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")
    }
    assert {"*", "authorization"} <= set(allowed)
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in response.headers


def test_a_servers_call_without_an_origin_gets_no_cors_headers_and_a_browsers_does(
    platform_url, origins
):
    shop = origins[0]
    _, key = client_app_create(actor=None, name="shop-web", allowed_origins=shop)
    url = f"{platform_url}/api/v1/complete"
    _until_served(url, shop)
    auth = {"Authorization": f"Bearer {key}"}
    server = httpx.post(url, json={"prompt": "Hi"}, headers=auth)
    assert server.status_code == 200
    assert not [name for name in server.headers if name.startswith("access-control-")]
    browser = httpx.post(url, json={"prompt": "Hi"}, headers={**auth, "Origin": shop})
    assert browser.headers["access-control-allow-origin"] == shop
    assert "X-Failover-Tier" in browser.headers["access-control-expose-headers"]
    assert "origin" in browser.headers["vary"].lower()
