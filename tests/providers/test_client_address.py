"""The caller's address as the gateway vouches for it (`client_address`): the peer's, or behind
TRUSTED_PROXY_HOPS proxies the entry the outermost of them wrote, and `UNVERIFIED` for what no
proxy vouches for: too few entries, an entry that is no address, a peer the server took from
the header itself (uvicorn's ProxyHeadersMiddleware, run here as uvicorn runs it)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.handlers.asgi import ASGIRequest
from django.test import RequestFactory
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from edge.api.access import (
    UNVERIFIED,
    address_subject,
    client_address,
    rewritten_peer_reported,
)
from edge.probes import address_allowed

pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]
EVERYWHERE = ["0.0.0.0/0", "::/0"]
TOLD = "--no-proxy-headers"


@pytest.fixture(autouse=True)
def _not_yet_reported():
    rewritten_peer_reported.cache_clear()
    yield
    rewritten_peer_reported.cache_clear()


def address(forwarded: str | None = None, *, peer: str = "192.0.2.10", port: int = 50123) -> str:
    """The address of a request from `peer` (a real connection: its own port) carrying
    `forwarded` as its X-Forwarded-For."""
    extra = {"REMOTE_ADDR": peer, "REMOTE_PORT": port}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(RequestFactory().get("/", **extra))


async def through_uvicorn(
    forwarded: list[str], *, peer: tuple[str, int] = ("127.0.0.1", 50123), trusted: str = "*"
) -> str:
    """The address of a request as uvicorn hands it over with its proxy headers on
    (`--proxy-headers --forwarded-allow-ips trusted`): each of `forwarded` one header line."""
    seen: list[str] = []

    async def application(scope, receive, send) -> None:
        seen.append(client_address(ASGIRequest(scope, io.BytesIO())))

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "query_string": b"",
        "headers": [(b"x-forwarded-for", value.encode("latin1")) for value in forwarded],
        "client": peer,
        "server": ("127.0.0.1", 8000),
    }
    await ProxyHeadersMiddleware(application, trusted_hosts=trusted)(scope, None, None)
    return seen[0]


def test_with_no_proxy_trusted_the_peers_address_is_the_callers_whatever_the_header_says(
    settings,
):
    settings.TRUSTED_PROXY_HOPS = 0
    assert address() == "192.0.2.10"
    assert address("127.0.0.1") == "192.0.2.10"
    assert address("198.51.100.1, 10.0.0.1") == "192.0.2.10"


def test_behind_one_proxy_the_right_most_entry_is_the_callers(settings):
    settings.TRUSTED_PROXY_HOPS = 1
    assert address("203.0.113.7", peer="127.0.0.1") == "203.0.113.7"
    assert address("127.0.0.1, 10.0.0.1, 203.0.113.7", peer="127.0.0.1") == "203.0.113.7"


def test_behind_two_proxies_the_second_entry_from_the_right_is_the_callers(settings):
    settings.TRUSTED_PROXY_HOPS = 2
    assert address("203.0.113.7, 10.0.0.5", peer="10.0.0.6") == "203.0.113.7"
    assert address("127.0.0.1, 203.0.113.7, 10.0.0.5", peer="10.0.0.6") == "203.0.113.7"


def test_forged_entries_left_of_the_proxys_never_change_the_address(settings):
    settings.TRUSTED_PROXY_HOPS = 1
    forged = ["127.0.0.1", "10.0.0.1", "::1", "garbage", "198.51.100.1:80", ", , ", "a" * 500]
    seen = {address(f"{value}, 203.0.113.7", peer="127.0.0.1") for value in forged}
    assert seen == {"203.0.113.7"}


def test_fewer_entries_than_proxies_is_a_request_no_proxy_vouches_for(settings):
    settings.TRUSTED_PROXY_HOPS = 2
    assert address("127.0.0.1", peer="10.0.0.6") == UNVERIFIED
    assert address(" , 127.0.0.1, ", peer="10.0.0.6") == UNVERIFIED  # blanks are no entries
    settings.TRUSTED_PROXY_HOPS = 3
    assert address("203.0.113.7, 10.0.0.5", peer="10.0.0.6") == UNVERIFIED


def test_a_request_with_no_forwarded_header_came_straight_here_and_is_its_peer(settings):
    # A scraper or a health check on the serving process itself: no proxy in between, and
    # nothing the server could have taken a peer from.
    settings.TRUSTED_PROXY_HOPS = 1
    assert address(peer="10.0.0.9") == "10.0.0.9"
    assert address("", peer="10.0.0.9") == "10.0.0.9"
    assert address(" , ", peer="10.0.0.9") == "10.0.0.9"


@pytest.mark.parametrize(
    "entry",
    ["garbage", "unknown", "999.1.1.1", "1.2.3", "203.0.113.7;", "[203.0.113.7", "2001:db8::7::1",
     "_hidden", "203.0.113.7 203.0.113.8", "localhost", "a" * 300],
)  # fmt: skip
def test_an_entry_that_is_no_address_is_unverified_and_passes_no_allow_list(settings, entry):
    settings.TRUSTED_PROXY_HOPS = 1
    seen = address(f"127.0.0.1, {entry}", peer="127.0.0.1")
    assert seen == UNVERIFIED
    assert not address_allowed(seen, EVERYWHERE)
    assert address_subject(seen) == address_subject(UNVERIFIED)  # one window for them all


@pytest.mark.parametrize(
    ("entry", "read"),
    [
        ("203.0.113.7:5123", "203.0.113.7"),
        ("[2001:db8::7]:443", "2001:db8::7"),
        ("[2001:db8::7]", "2001:db8::7"),
        ("2001:DB8:0::7", "2001:db8::7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("fe80::1%eth0", "fe80::1"),
    ],
)
def test_an_entry_with_a_port_brackets_or_another_spelling_is_read_as_its_address(
    settings, entry, read
):
    settings.TRUSTED_PROXY_HOPS = 1
    assert address(entry, peer="127.0.0.1") == read


def test_a_peer_that_is_no_address_is_unverified(settings):
    settings.TRUSTED_PROXY_HOPS = 0
    assert address(peer="not-an-address") == UNVERIFIED


@pytest.mark.parametrize(
    "forged",
    [["198.51.100.7"], ["198.51.100.7:8080"], ["[2001:db8::7]:443"], ["2001:db8::7"],
     ["198.51.100.7: 5"], ["garbage"], ["127.0.0.2, 10.0.0.1"], ["198.51.100.7", "10.0.0.1"]],
)  # fmt: skip
async def test_a_peer_uvicorn_took_from_the_header_is_unverified(settings, forged):
    settings.TRUSTED_PROXY_HOPS = 0
    assert await through_uvicorn(forged) == UNVERIFIED
    # Its default (proxy headers on, 127.0.0.1 trusted) does the same for a local peer.
    assert await through_uvicorn(forged, trusted="127.0.0.1") == UNVERIFIED


async def test_forged_addresses_through_uvicorn_share_one_window_and_pass_no_allow_list(settings):
    settings.TRUSTED_PROXY_HOPS = 0
    seen = {await through_uvicorn([f"198.51.100.{n}"]) for n in range(20)}
    assert seen == {UNVERIFIED}
    assert not address_allowed(UNVERIFIED, EVERYWHERE)


async def test_the_operator_is_told_once_to_run_uvicorn_without_proxy_headers(settings, caplog):
    settings.TRUSTED_PROXY_HOPS = 0
    with caplog.at_level(logging.WARNING, logger="edge.api.access"):
        for n in range(5):
            await through_uvicorn([f"198.51.100.{n}"])
    [record] = [r for r in caplog.records if TOLD in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert "unverified" in record.getMessage()


async def test_behind_a_proxy_a_peer_uvicorn_rewrote_changes_nothing_but_is_reported(
    settings, caplog
):
    settings.TRUSTED_PROXY_HOPS = 1
    with caplog.at_level(logging.WARNING, logger="edge.api.access"):
        assert await through_uvicorn(["127.0.0.2, 203.0.113.7"]) == "203.0.113.7"
        assert await through_uvicorn(["203.0.113.7"], trusted="127.0.0.1") == "203.0.113.7"
    [record] = [r for r in caplog.records if TOLD in r.getMessage()]
    assert record.levelno == logging.WARNING


async def test_without_uvicorns_proxy_headers_a_forged_header_changes_nothing(settings, caplog):
    settings.TRUSTED_PROXY_HOPS = 0
    # Uvicorn with --no-proxy-headers hands the application the connection's own peer.
    request = ASGIRequest(
        {
            "type": "http",
            "method": "GET",
            "path": "/",
            "headers": [(b"x-forwarded-for", b"198.51.100.7")],
            "client": ("192.0.2.10", 50123),
        },
        io.BytesIO(),
    )
    with caplog.at_level(logging.WARNING, logger="edge.api.access"):
        assert client_address(request) == "192.0.2.10"
    assert not caplog.records


def test_a_peer_that_shares_its_host_with_an_entry_is_no_rewrite(settings, caplog):
    # A client on the proxy's own machine: the proxy's entry names the host the connection
    # comes from, without the connection's port.
    settings.TRUSTED_PROXY_HOPS = 0
    with caplog.at_level(logging.WARNING, logger="edge.api.access"):
        assert address("198.51.100.1, 127.0.0.1", peer="127.0.0.1") == "127.0.0.1"
        assert address("[::1]", peer="::1") == "::1"
    assert not caplog.records


def test_a_negative_number_of_proxies_is_refused_at_start(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "ENV_FILE": "",
        "DATA_DIR": str(tmp_path),
        "TRUSTED_PROXY_HOPS": "-1",
        "DJANGO_SETTINGS_MODULE": "failover_site.settings",
    }
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "TRUSTED_PROXY_HOPS must be 0 or the number of proxies in front" in result.stderr
