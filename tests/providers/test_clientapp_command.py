"""`manage.py clientapp` (create, list, revoke) and the demo set-up's client app: a key is printed
once, when it is made, and never again."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command

from gateway.engine.clients import key_digest
from providers.models import ChangeAction, ClientApp, ConfigChange

pytestmark = pytest.mark.django_db

KEY = re.compile(r"fgw_[A-Za-z0-9_-]{43}")


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def _clientapp(*args: str) -> str:
    return _run("clientapp", *args)


class TestCreate:
    def test_it_prints_the_key_once_and_keeps_only_its_digest(self):
        output = _clientapp("create", "shop")

        [key] = KEY.findall(output)
        assert "shown this once" in output
        app = ClientApp.objects.get(name="shop")
        assert (app.key_prefix, app.key_digest) == (key[:12], key_digest(key))
        assert app.usable
        assert key not in str(list(ClientApp.objects.values()))
        created = ConfigChange.objects.get(action=ChangeAction.CREATE)
        assert created.actor_name == "system" and key not in str(created.after)

    def test_its_options_land_on_the_app(self):
        _clientapp(
            "create",
            "widget",
            "--description",
            "The shop's chat widget",
            "--rpm",
            "30",
            "--tpm",
            "5000",
            "--origin",
            "https://shop.example.com",
            "--origin",
            "http://localhost:3000",
            "--model",
            "ollama-local",
            "--no-cloud",
            "--high-priority",
            "--status",
        )

        app = ClientApp.objects.get(name="widget")
        assert app.description == "The shop's chat widget"
        assert (app.requests_per_minute, app.tokens_per_minute) == (30, 5000)
        assert app.allowed_origins.splitlines() == [
            "https://shop.example.com",
            "http://localhost:3000",
        ]
        assert app.allowed_models == "ollama-local"
        assert (app.allow_cloud, app.allow_high_priority, app.can_read_status) == (
            False,
            True,
            True,
        )

    def test_without_options_it_takes_the_models_defaults(self):
        _clientapp("create", "plain")
        app = ClientApp.objects.get(name="plain")
        assert (app.requests_per_minute, app.tokens_per_minute) == (600, 200_000)
        assert (app.allow_cloud, app.allow_high_priority, app.can_read_status) == (
            True,
            False,
            False,
        )
        assert (app.allowed_origins, app.allowed_models) == ("", "")

    def test_json_output_holds_the_key_and_the_options(self):
        made = json.loads(_clientapp("create", "scripted", "--rpm", "5", "--model", "*", "--json"))

        app = ClientApp.objects.get(name="scripted")
        assert key_digest(made["key"]) == app.key_digest
        assert made["key_prefix"] == app.key_prefix == made["key"][:12]
        assert (made["name"], made["requests_per_minute"], made["allowed_models"]) == (
            "scripted",
            5,
            ["*"],
        )
        assert (made["enabled"], made["revoked"], made["allow_cloud"]) == (True, False, True)

    def test_a_bad_origin_is_refused_with_the_reason_and_makes_nothing(self):
        with pytest.raises(CommandError, match="allowed_origins: 'ftp://shop.example.com' is not"):
            _clientapp("create", "shop", "--origin", "ftp://shop.example.com")
        assert not ClientApp.objects.exists()
        assert not ConfigChange.objects.exists()

    def test_a_name_already_taken_is_refused(self):
        _clientapp("create", "shop")
        with pytest.raises(CommandError, match=r"name: .*already exists"):
            _clientapp("create", "shop")
        assert ClientApp.objects.count() == 1

    def test_a_name_that_cannot_name_a_client_is_refused(self):
        with pytest.raises(CommandError, match="name: Letters, digits"):
            _clientapp("create", "has spaces")
        assert not ClientApp.objects.exists()


class TestList:
    def test_it_shows_the_prefixes_and_states_but_never_a_key(self):
        shop_key = KEY.findall(_clientapp("create", "shop"))[0]
        widget_key = KEY.findall(_clientapp("create", "widget", "--rpm", "30"))[0]
        _clientapp("revoke", "widget")

        listing = _clientapp("list")

        assert shop_key not in listing and widget_key not in listing
        assert not KEY.search(listing)
        shop_line, widget_line = listing.splitlines()
        assert shop_line.startswith("shop") and f"{shop_key[:12]}…" in shop_line
        assert "enabled" in shop_line
        assert widget_line.startswith("widget") and "revoked" in widget_line
        assert "30 rpm" in widget_line

    def test_its_json_has_the_prefixes_and_no_key(self):
        key = KEY.findall(_clientapp("create", "shop"))[0]

        raw = _clientapp("list", "--json")

        [row] = json.loads(raw)
        assert key not in raw and "key" not in row
        assert (row["name"], row["key_prefix"]) == ("shop", key[:12])


class TestRevoke:
    def test_it_revokes_the_key_and_records_it(self):
        _clientapp("create", "shop")

        output = _clientapp("revoke", "shop", "--reason", "key leaked in a screenshot")

        app = ClientApp.objects.get(name="shop")
        assert f"Revoked the key of shop ({app.key_prefix}…)" in output
        assert app.revoked_at is not None and not app.usable
        change = ConfigChange.objects.get(action=ChangeAction.UPDATE)
        assert change.reason == "key leaked in a screenshot"

    def test_revoking_again_says_it_already_was(self):
        _clientapp("create", "shop")
        _clientapp("revoke", "shop")
        revoked_at = ClientApp.objects.get().revoked_at

        output = _clientapp("revoke", "shop")

        assert "already revoked" in output
        assert ClientApp.objects.get().revoked_at == revoked_at
        assert ConfigChange.objects.filter(action=ChangeAction.UPDATE).count() == 1

    def test_an_unknown_name_is_refused(self):
        with pytest.raises(CommandError, match="No client app is named 'nobody'"):
            _clientapp("revoke", "nobody")


class TestDemoClient:
    @pytest.fixture(autouse=True)
    def _embedded(self, settings):
        # The demo set-up runs in the embedded mode only, on whichever database this pass runs
        # (the test runner turns DEBUG off; a serving process's DEBUG is the environment's).
        settings.DEBUG, settings.STATE_BACKEND, settings.REDIS_URL = True, "memory", ""

    def test_the_demo_set_up_makes_its_client_app_once_and_prints_its_key_once(self):
        first = _run("bootstrap", "--demo")

        [key] = KEY.findall(first)
        app = ClientApp.objects.get()
        assert app.name == "demo" and app.key_digest == key_digest(key)
        assert (app.allowed_models, app.allow_high_priority, app.can_read_status) == (
            "*",
            True,
            True,
        )
        assert "FAILOVER_API_KEY" in first

        second = _run("bootstrap", "--demo")

        assert not KEY.search(second) and "API key" not in second
        assert ClientApp.objects.count() == 1
        assert ClientApp.objects.get().key_digest == app.key_digest

    def test_without_demo_no_client_app_is_made(self):
        assert not KEY.search(_run("bootstrap"))
        assert not ClientApp.objects.exists()
