"""The outbound URL policy for providers: its rules, a base URL refused when it is saved (the
model and the admin form), and refused again when it is called, against what its host resolves
to then, on both connection pools, with nothing sent."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.urls import reverse

from devtools.fake_provider import FakeProvider
from gateway.adapters import ADAPTERS
from gateway.adapters.base import ProviderAdapter
from gateway.adapters.errors import ErrorClass, ProviderError
from gateway.adapters.messages import CompletionRequest
from gateway.adapters.pool import make_client
from gateway.engine.config import ProviderConfig
from gateway.engine.outbound import (
    OutboundPolicy,
    address_refusal,
    allowed_addresses,
    host_refusal,
    resolved_refusal,
    url_refusal,
)
from providers.models import Provider
from runtime.gateway import settings_for_clients
from tests.admin_forms import change_form_data
from tests.factories import make_provider
from tests.outbound import LocalDns, RedirectServer
from tests.providers.conftest import ask, ledger_rows

STRICT = OutboundPolicy()
LOOPBACK = OutboundPolicy(loopback=True)
PRIVATE = OutboundPolicy(private=True)
EVERYTHING = OutboundPolicy(loopback=True, private=True)


@pytest.fixture
def local_dns(monkeypatch: pytest.MonkeyPatch) -> LocalDns:
    return LocalDns(monkeypatch)


@pytest.mark.backend_free
class TestTheRules:
    @pytest.mark.parametrize(
        "address",
        [
            "169.254.169.254",
            "169.254.170.2",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",  # IPv4-mapped
            "2002:a9fe:a9fe::1",  # 6to4
            "64:ff9b::a9fe:a9fe",  # NAT64
        ],
    )
    def test_it_never_allows_a_cloud_metadata_address(self, address):
        assert "cloud metadata address (never allowed)" in address_refusal(address, EVERYTHING)

    @pytest.mark.parametrize("address", ["169.254.1.1", "fe80::1", "fe80::1%eth0"])
    def test_it_never_allows_a_link_local_address(self, address):
        assert "link-local address (never allowed)" in address_refusal(address, EVERYTHING)

    @pytest.mark.parametrize("address", ["0.0.0.0", "::", "224.0.0.1", "ff02::1", "240.0.0.1"])
    def test_it_never_allows_what_is_not_a_unicast_host(self, address):
        assert "not a unicast host address" in address_refusal(address, EVERYTHING)

    @pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
    def test_loopback_needs_its_allowance(self, address):
        assert "loopback address (allowed only with OUTBOUND_ALLOW=loopback)" in (
            address_refusal(address, PRIVATE)
        )
        assert address_refusal(address, LOOPBACK) == ""

    @pytest.mark.parametrize(
        "address",
        ["10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fc00::1", "fd12:3456::1"],
    )
    def test_private_addresses_need_their_allowance(self, address):
        assert "private address (allowed only with OUTBOUND_ALLOW=private)" in (
            address_refusal(address, LOOPBACK)
        )
        assert address_refusal(address, PRIVATE) == ""

    @pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111"])
    def test_the_public_internet_is_allowed_under_the_strictest_policy(self, address):
        assert address_refusal(address, STRICT) == ""

    @pytest.mark.parametrize(
        "host", ["metadata.google.internal", "METADATA.Google.Internal.", "metadata"]
    )
    def test_a_metadata_service_is_refused_by_its_name_before_any_lookup(self, host):
        assert "cloud metadata service (never allowed)" in host_refusal(host, EVERYTHING)

    def test_a_name_is_refused_if_any_of_its_addresses_is(self):
        refusal = resolved_refusal("mixed.test", ["8.8.8.8", "10.0.0.1"], STRICT)
        assert refusal.startswith("mixed.test resolves to 10.0.0.1, a private address")
        assert resolved_refusal("public.test", ["8.8.8.8", "2606:4700::1111"], STRICT) == ""

    @pytest.mark.parametrize(
        ("url", "problem"),
        [
            ("file:///etc/passwd", "only http:// and https://"),
            ("ftp://models.example.com", "only http:// and https://"),
            ("http://user:pw@models.example.com/", "user name or password"),
            ("http://@models.example.com/", "user name or password"),
            ("http://models.example.com/v1?x=", "query string"),
            ("http://models.example.com/v1?", "query string"),
            ("http://models.example.com/v1#part", "fragment"),
            ("http://models.example.com\\@169.254.169.254/", "backslashes"),
            ("http://models.example.com/ v1", "spaces"),
        ],
    )
    def test_it_refuses_a_url_by_its_form(self, url, problem):
        assert problem in url_refusal(url)

    @pytest.mark.parametrize(
        "url",
        [
            "https://api.openai.com/v1",
            "http://127.0.0.1:11434",
            "HTTPS://api.example.com",
            "https://api.example.com/ai/run/@cf/meta",  # an @ in the path is no user name
        ],
    )
    def test_it_accepts_a_plain_http_or_https_url(self, url):
        assert url_refusal(url) == ""

    def test_an_unknown_allowance_is_refused(self):
        with pytest.raises(ValueError, match="unknown outbound allowance everything"):
            OutboundPolicy.allowing(["loopback", "everything"])
        assert OutboundPolicy.allowing([" Loopback ", ""]) == LOOPBACK

    def test_a_resolvers_answer_is_each_address_once_in_its_order_judged_whole(self):
        def entry(address: str) -> tuple[Any, ...]:
            return (2, 1, 6, "", (address, 443))

        answer = [entry("93.184.215.14"), entry("93.184.215.14"), entry("2606:2800:21f::1")]
        assert allowed_addresses("example.com", answer, OutboundPolicy()) == (
            ["93.184.215.14", "2606:2800:21f::1"],
            "",
        )
        rebinding = [entry("93.184.215.14"), entry("10.0.0.5")]
        addresses, refusal = allowed_addresses("mixed.example", rebinding, OutboundPolicy())
        assert addresses == ["93.184.215.14", "10.0.0.5"]
        assert refusal == (
            "mixed.example resolves to 10.0.0.5, a private address (allowed only with "
            "OUTBOUND_ALLOW=private)"
        )


def _base_url_errors(url: str) -> list[str]:
    provider = Provider(name="p", kind="openai", base_url=url, model="m")
    try:
        provider.full_clean()
    except ValidationError as exc:
        return exc.message_dict.get("base_url", [])
    return []


@pytest.mark.django_db
class TestWhenSaved:
    @pytest.mark.parametrize(
        ("url", "message"),
        [
            (
                "http://169.254.169.254/",
                "Blocked by the URL policy: 169.254.169.254 is a cloud metadata address "
                "(never allowed).",
            ),
            ("file:///etc/passwd", "Enter an http:// or https:// URL."),
            (
                "http://user:pw@models.example.com/",
                "Blocked by the URL policy: a URL can't carry a user name or password (keep "
                "secrets in the environment).",
            ),
            (
                "http://models.example.com/v1?x=",
                "Blocked by the URL policy: a URL can't have a query string (?…).",
            ),
            (
                "http://models.example.com/v1#part",
                "Blocked by the URL policy: a URL can't have a fragment (#…).",
            ),
            (
                "http://metadata.google.internal/",
                "Blocked by the URL policy: metadata.google.internal is a cloud metadata "
                "service (never allowed).",
            ),
        ],
    )
    def test_it_refuses_the_url_with_a_clear_message(self, local_dns, url, message):
        assert message in _base_url_errors(url)

    def test_a_name_resolving_to_a_private_address_is_refused_unless_allowed(
        self, local_dns, settings
    ):
        local_dns.add("models.corp.test", "10.20.30.40")
        settings.OUTBOUND_ALLOW = ["loopback"]
        assert _base_url_errors("http://models.corp.test:8000") == [
            "Blocked by the URL policy: models.corp.test resolves to 10.20.30.40, a private "
            "address (allowed only with OUTBOUND_ALLOW=private)."
        ]
        settings.OUTBOUND_ALLOW = ["private"]
        assert _base_url_errors("http://models.corp.test:8000") == []

    @pytest.mark.parametrize("url", ["http://127.0.0.1:11434", "http://localhost:11434"])
    def test_loopback_is_refused_unless_allowed(self, settings, url):
        settings.OUTBOUND_ALLOW = []
        [message] = _base_url_errors(url)
        assert "a loopback address (allowed only with OUTBOUND_ALLOW=loopback)" in message
        settings.OUTBOUND_ALLOW = ["loopback"]
        assert _base_url_errors(url) == []

    def test_a_name_that_does_not_resolve_now_is_left_to_the_call(self, local_dns, settings):
        settings.OUTBOUND_ALLOW = []
        assert _base_url_errors("https://models.example.com") == []

    def test_the_admin_form_shows_the_refusal_on_the_base_url(self, client, admin_user):
        client.force_login(admin_user)
        provider = make_provider(name="ollama-gpu")
        url = reverse("admin:providers_provider_change", args=[provider.pk])
        data = change_form_data(client, url, base_url="http://169.254.169.254/latest/meta-data")
        response = client.post(url, data)
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["base_url"] == [
            "Blocked by the URL policy: 169.254.169.254 is a cloud metadata address "
            "(never allowed)."
        ]
        provider.refresh_from_db()
        assert provider.base_url == "http://127.0.0.1:11434"


def _config(url: str) -> ProviderConfig:
    return ProviderConfig(
        name="openai-test",
        kind="openai",
        base_url=url,
        model="gpt-4o-mini",
        priority=10,
        is_local=False,
        timeout_s=5.0,
        context_window=8192,
    )


@pytest.fixture(params=["native", "aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest, settings: Any) -> str:
    settings.PROVIDER_HTTP_CLIENT = request.param
    return request.param


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture
async def make_adapter(transport) -> AsyncIterator[Callable[[str], ProviderAdapter]]:
    """Adapters made as the pool makes them, from a configuration as the snapshot carries it
    (whatever the row holds: saved around the model's checks or not)."""
    made: list[ProviderAdapter] = []

    def make(url: str) -> ProviderAdapter:
        config = _config(url)
        adapter = ADAPTERS["openai"](config, make_client(config, settings_for_clients()))
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.client.aclose()


async def _refusal(adapter: ProviderAdapter) -> ProviderError:
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await adapter.complete(CompletionRequest(prompt="Where is my order?"), timeout=5.0)
    # Refused before any connection: no connect timeout, no waiting on an address.
    assert time.monotonic() - started < 1.0
    return caught.value


@pytest.mark.backend_free
class TestWhenCalled:
    async def test_a_metadata_address_is_refused_as_the_gateways_configuration(self, make_adapter):
        error = await _refusal(make_adapter("http://169.254.169.254"))
        assert error.error_class is ErrorClass.UPSTREAM_REJECTED
        assert error.message == (
            "blocked by the URL policy: 169.254.169.254 is a cloud metadata address (never allowed)"
        )
        # Not the client's fault (no 400 for the caller), and the next provider is tried.
        assert error.rule.try_next and error.status is None

    async def test_a_name_resolving_to_a_private_address_is_refused(
        self, make_adapter, local_dns, settings
    ):
        local_dns.add("models.corp.test", "10.20.30.40")
        settings.OUTBOUND_ALLOW = ["loopback"]
        error = await _refusal(make_adapter("http://models.corp.test:8000"))
        assert error.message == (
            "blocked by the URL policy: models.corp.test resolves to 10.20.30.40, a private "
            "address (allowed only with OUTBOUND_ALLOW=private)"
        )
        assert local_dns.lookups == ["models.corp.test"]

    async def test_localhost_is_refused_when_loopback_is_not_allowed_and_nothing_arrives(
        self, make_adapter, fake, settings
    ):
        settings.OUTBOUND_ALLOW = []
        error = await _refusal(make_adapter(f"http://localhost:{fake.port}"))
        assert error.error_class is ErrorClass.UPSTREAM_REJECTED
        assert "localhost resolves to 127.0.0.1, a loopback address" in error.message
        assert fake.calls == 0

    async def test_localhost_is_called_when_loopback_is_allowed(self, make_adapter, fake, settings):
        settings.OUTBOUND_ALLOW = ["loopback"]
        adapter = make_adapter(f"http://localhost:{fake.port}")
        completion = await adapter.complete(CompletionRequest(prompt="Hi"), timeout=5.0)
        assert completion.text and fake.calls == 1

    async def test_the_address_resolved_at_call_time_decides_not_the_one_seen_when_saved(
        self, make_adapter, fake, local_dns, settings
    ):
        # Saved while the name pointed at a public address; by the call it points inside.
        local_dns.rebind("models.rebind.test", "93.184.216.34", "127.0.0.1")
        settings.OUTBOUND_ALLOW = []
        assert _base_url_errors_without_db(f"http://models.rebind.test:{fake.port}") == []
        error = await _refusal(make_adapter(f"http://models.rebind.test:{fake.port}"))
        assert "models.rebind.test resolves to 127.0.0.1, a loopback address" in error.message
        assert fake.calls == 0

    async def test_a_name_allowed_at_call_time_connects_to_the_address_it_resolved_to(
        self, make_adapter, fake, local_dns, settings
    ):
        local_dns.add("models.local.test", "127.0.0.1")
        settings.OUTBOUND_ALLOW = ["loopback"]
        adapter = make_adapter(f"http://models.local.test:{fake.port}")
        completion = await adapter.complete(CompletionRequest(prompt="Hi"), timeout=5.0)
        assert completion.text and fake.calls == 1
        assert "models.local.test" in local_dns.lookups

    async def test_a_query_string_saved_around_the_checks_sends_nothing(self, make_adapter, fake):
        error = await _refusal(make_adapter(f"{fake.url}/v1?x="))
        assert error.message == "blocked by the URL policy: a URL can't have a query string (?…)"
        assert fake.calls == 0

    async def test_the_health_check_is_refused_the_same_way(self, make_adapter, settings, fake):
        settings.OUTBOUND_ALLOW = []
        result = await make_adapter(fake.url).health_check(timeout=2.0)
        assert not result.ok and result.error_class is ErrorClass.UPSTREAM_REJECTED
        assert "blocked by the URL policy" in result.detail
        assert fake.calls == 0

    async def test_a_redirect_from_a_provider_is_not_followed(self, make_adapter, fake):
        with RedirectServer(f"{fake.url}/v1/chat/completions") as redirecting:
            with pytest.raises(ProviderError) as caught:
                await make_adapter(redirecting.url).complete(
                    CompletionRequest(prompt="Hi"), timeout=5.0
                )
            assert redirecting.requests == 1
        assert caught.value.error_class is ErrorClass.MALFORMED
        assert fake.calls == 0


def _base_url_errors_without_db(url: str) -> list[str]:
    """The field's own validators (what the model's full_clean runs for it), without a row."""
    try:
        Provider._meta.get_field("base_url").run_validators(url)
    except ValidationError as exc:
        return exc.messages
    return []


@pytest.mark.django_db(transaction=True)
async def test_a_row_changed_around_the_checks_is_refused_at_call_time_and_the_next_answers(
    api, gateway, primary, secondary, providers_configured
):
    await sync_to_async(Provider.objects.filter(name="ollama-local").update)(
        base_url="http://169.254.169.254:11434"
    )
    await gateway.snapshots.refresh()
    response = await ask(api)
    assert response.status_code == 200
    assert response.json()["provider"] == "openai-cloud"
    [record] = await ledger_rows(gateway)
    blocked = record.attempts[0]
    assert (blocked["provider"], blocked["outcome"], blocked["error_class"]) == (
        "ollama-local",
        "error",
        "upstream_rejected",
    )
    assert "blocked by the URL policy: 169.254.169.254" in blocked["detail"]
    assert (primary.calls, secondary.calls) == (0, 1)
