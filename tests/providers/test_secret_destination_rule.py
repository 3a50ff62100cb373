"""Where a secret may be sent, as a rule: each secret variable bound to destinations (scheme,
host and port) that a URL must match whole, a host written alone read as https on 443, and
this machine open to every secret only in the embedded mode, by `localhost` and loopback
addresses themselves. Where the rule is enforced (providers, alert channels):
test_secret_destinations.py."""

from __future__ import annotations

import logging

import pytest
from django.apps import apps

from gateway.engine.secret_destinations import (
    Origin,
    SecretDestinations,
    destinations_parse,
    url_origin,
)

pytestmark = pytest.mark.backend_free


def test_a_secret_goes_to_its_destinations_and_to_names_under_a_wildcard_only():
    rule = SecretDestinations(
        hosts=destinations_parse(
            ["OPENAI_API_KEY=https://api.openai.com", "AZURE=https://*.openai.azure.com"]
        )
    )
    assert rule.refusal("OPENAI_API_KEY", "https://api.openai.com/v1") == ""
    assert rule.refusal("OPENAI_API_KEY", "https://API.OpenAI.com.:443/v1") == ""
    assert rule.refusal("AZURE", "https://contoso.openai.azure.com") == ""
    assert rule.refusal("AZURE", "https://openai.azure.com") != ""  # the domain itself: no
    assert rule.refusal("AZURE", "https://contoso.openai.azure.com.evil.example") != ""
    assert rule.refusal("OPENAI_API_KEY", "https://api.openai.com@evil.example/v1") == (
        "OPENAI_API_KEY may be sent only to https://api.openai.com:443, not to "
        "https://evil.example:443"
    )
    assert rule.refusal("FAILOVER_SECRET_X", "https://api.openai.com") == (
        "FAILOVER_SECRET_X may not be sent to https://api.openai.com:443: SECRET_DESTINATIONS "
        "names nowhere for it"
    )


def test_a_secret_bound_to_one_port_of_a_host_goes_to_no_other_port_nor_scheme():
    rule = SecretDestinations(hosts=destinations_parse(["K=http://127.0.0.1:8001"]))
    assert rule.refusal("K", "http://127.0.0.1:8001/v1") == ""
    assert rule.refusal("K", "http://127.0.0.1:8002/v1") == (
        "K may be sent only to http://127.0.0.1:8001, not to http://127.0.0.1:8002"
    )
    assert rule.refusal("K", "https://127.0.0.1:8001/v1") != ""
    assert rule.refusal("K", "http://127.0.0.1/v1") != ""  # port 80
    tls = SecretDestinations(hosts=destinations_parse(["K=https://api.example.com"]))
    assert tls.refusal("K", "https://api.example.com:443/v1") == ""
    assert tls.refusal("K", "https://api.example.com:8443/v1") != ""
    assert tls.refusal("K", "http://api.example.com/v1") != ""  # not over TLS: no


def test_a_host_written_alone_still_works_over_https_on_443_with_a_warning(settings, caplog):
    rule = SecretDestinations(hosts=destinations_parse(["FAILOVER_SECRET_VLLM=vllm.internal"]))
    assert rule.refusal("FAILOVER_SECRET_VLLM", "https://vllm.internal/v1") == ""
    for elsewhere in ("http://vllm.internal/v1", "https://vllm.internal:8443/v1"):
        assert rule.refusal("FAILOVER_SECRET_VLLM", elsewhere) == (
            f"FAILOVER_SECRET_VLLM may be sent only to https://vllm.internal:443, not to "
            f"{url_origin(elsewhere)}"
        )
    written = ["FAILOVER_SECRET_VLLM=vllm.internal", "FAILOVER_SECRET_B=https://b.example"]
    settings.SECRET_DESTINATIONS = {**settings.SECRET_DESTINATIONS, **destinations_parse(written)}
    with caplog.at_level(logging.WARNING):
        apps.get_app_config("providers").ready()  # what each process does once, at its start
    warned = [record for record in caplog.records if record.name == "providers.apps"]
    assert [record.getMessage() for record in warned] == [
        "SECRET_DESTINATIONS: FAILOVER_SECRET_VLLM=vllm.internal names a host without a scheme "
        "or port, read as https://vllm.internal:443; write "
        "FAILOVER_SECRET_VLLM=https://vllm.internal (or the scheme and port it is served on, "
        "e.g. http://host:8000)"
    ]


def test_loopback_is_open_to_every_secret_only_when_the_rule_says_so():
    hosts = destinations_parse(["K=https://api.example.com"])
    closed = SecretDestinations(hosts=hosts)
    opened = SecretDestinations(hosts=hosts, loopback=True)
    for url in ("http://127.0.0.1:11434", "http://[::1]:8000", "http://localhost:9"):
        assert closed.refusal("K", url) != "" and opened.refusal("K", url) == ""
    assert opened.refusal("K", "http://10.0.0.5") != ""  # private is not loopback
    assert opened.where("K") == (
        "https://api.example.com:443, this machine (localhost or a loopback IP address, any port)"
    )


def test_only_localhost_itself_is_this_machine_not_a_name_under_it():
    opened = SecretDestinations(
        hosts=destinations_parse(["K=https://api.example.com"]), loopback=True
    )
    # Any other name goes to the resolver, which may answer with anyone's address.
    for url in ("http://evil.localhost/v1", "http://a.b.localhost:8000", "http://localhost./v1"):
        assert opened.refusal("K", url).endswith(f"not to {url_origin(url)}")


def test_the_declarations_are_parsed_strictly():
    parsed = destinations_parse(
        ["FAILOVER_SECRET_VLLM=http://VLLM.internal:8000/; https://*.example.com ", ""]
    )
    assert [str(place) for place in parsed["FAILOVER_SECRET_VLLM"]] == [
        "http://vllm.internal:8000",
        "https://*.example.com:443",
    ]
    [v4, v6] = destinations_parse(["K=http://10.0.0.5;https://[::1]:8443"])["K"]
    assert (str(v4), str(v6)) == ("http://10.0.0.5:80", "https://[::1]:8443")
    for bad in ("K", "K=", "=host", "K=host/path", "K=host:443", "K=*", "K=ftp://host",
                "K=https://host/v1", "K=https://host:0", "K=https://host:x", "K=https://u@host",
                "K=https://[host]", "K=https://"):  # fmt: skip
        with pytest.raises(ValueError):
            destinations_parse([bad])
    assert url_origin("https://[::1]:8000/v1") == Origin("https", "::1", 8000)
    assert url_origin("HTTP://Host.Example/v1") == Origin("http", "host.example", 80)
    assert url_origin("not a url") is None and url_origin("http://host:99999") is None


def test_the_settings_bind_the_demos_names_to_their_vendors_over_tls(settings):
    vendors = {
        "OPENAI_API_KEY": "https://api.openai.com:443",
        "ANTHROPIC_API_KEY": "https://api.anthropic.com:443",
        "TELEGRAM_BOT_TOKEN": "https://api.telegram.org:443",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com:443",
    }
    for name, place in vendors.items():
        assert [str(found) for found in settings.SECRET_DESTINATIONS[name]] == [place]
