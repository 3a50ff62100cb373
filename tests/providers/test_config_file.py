"""The configuration as a file: `manage.py config export` and `config apply`."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from alerts.models import AlertChannel
from billing.models import Budget
from billing.seeding import demo_configuration_load
from gateway.engine.clients import key_digest
from providers.models import (
    AliasEntry,
    ClientApp,
    ConfigChange,
    FailoverPolicy,
    ModelAlias,
    Provider,
    StaticAnswer,
)
from providers.selectors import config_change_high_water
from providers.services.client_apps import client_app_create
from providers.services.seeding import demo_aliases_load

pytestmark = pytest.mark.django_db

SLACK_ENV = "FAILOVER_SECRET_TEST_SLACK"


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("config", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def configured(monkeypatch):
    """A deployment as an operator leaves it: the bootstrap's 50 answers, the demo's providers,
    aliases and budgets, plus a client app, an alert channel and a tuned policy."""
    monkeypatch.setenv(SLACK_ENV, "http://127.0.0.1:9/services/T000/B000/hook-secret-token")
    call_command("bootstrap", stdout=io.StringIO())
    assert demo_configuration_load()
    assert demo_aliases_load()
    client_app_create(actor=None, name="web", requests_per_minute=120, allowed_origins="")
    channel = AlertChannel(name="ops", kind="slack", config={"webhook_url_env": SLACK_ENV})
    channel.full_clean()
    channel.save()
    FailoverPolicy.objects.filter(pk=FailoverPolicy.SINGLETON_ID).update(consecutive_failures=7)
    assert Provider.objects.exists() and ModelAlias.objects.exists() and Budget.objects.exists()


def _empty_the_database() -> None:
    for model in (Budget, AliasEntry, ModelAlias, ClientApp, AlertChannel, StaticAnswer):
        model.objects.all().delete()
    Provider.objects.all().delete()
    FailoverPolicy.objects.all().delete()


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_file_round_trips_through_an_empty_database(configured, tmp_path: Path, fmt):
    path = tmp_path / f"config.{fmt}"
    _run("export", "--format", fmt, "--output", str(path))
    first = path.read_text(encoding="utf-8")

    _empty_the_database()
    out = _run("apply", str(path))
    again = tmp_path / f"again.{fmt}"
    _run("export", "--format", fmt, "--output", str(again))

    assert again.read_text(encoding="utf-8") == first
    assert StaticAnswer.objects.count() == 50
    assert FailoverPolicy.objects.get().consecutive_failures == 7
    # The client app was made anew, with a key printed this once and working.
    [line] = [line for line in out.splitlines() if line.startswith("client app web:")]
    key = line.rsplit(" ", 1)[1]
    assert ClientApp.objects.get(name="web").key_digest == key_digest(key)
    # Applying the same file again changes nothing.
    assert _run("apply", str(path)).strip().endswith("0 rows changed")


def test_the_kill_switch_stays_with_the_deployment(configured, tmp_path):
    """An incident's control: a file from staging never flips production's."""
    FailoverPolicy.objects.update(kill_switch="static_only", kill_switch_reason="incident")
    doc = yaml.safe_load(_run("export"))
    assert not set(FailoverPolicy.KILL_SWITCH_FIELDS) & set(doc["policy"])
    FailoverPolicy.objects.update(kill_switch="off", kill_switch_reason="")
    path = tmp_path / "during-incident.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    _run("apply", str(path))
    assert FailoverPolicy.objects.get().kill_switch == "off"


def test_the_file_holds_no_key_and_no_secret(configured):
    text = _run("export", "--format", "json")
    doc = json.loads(text)
    app = ClientApp.objects.get(name="web")
    assert app.key_prefix not in text and app.key_digest not in text
    assert "hook-secret-token" not in text
    assert {"key_prefix", "key_digest"}.isdisjoint(doc["client_apps"][0])
    assert doc["alert_channels"] == [
        {
            "name": "ops",
            "kind": "slack",
            "config": {"webhook_url_env": SLACK_ENV},
            "min_severity": AlertChannel._meta.get_field("min_severity").default,
            "enabled": True,
        }
    ]


def test_rows_are_named_not_numbered(configured):
    doc = yaml.safe_load(_run("export"))
    alias = doc["aliases"][0]
    entry = alias["entries"][0]
    assert set(entry) == {"provider", "model", "position"}
    assert Provider.objects.filter(name=entry["provider"]).exists()
    assert all(
        "id" not in row for section in doc.values() if isinstance(section, list) for row in section
    )
    budget = next(b for b in doc["budgets"] if b["provider"])
    assert Provider.objects.filter(name=budget["provider"]).exists()
    # Money as exact text.
    provider = next(p for p in doc["providers"] if Decimal(p["price_output_per_1m"]) > 0)
    assert isinstance(provider["price_output_per_1m"], str)


def test_a_dry_run_shows_the_diff_field_by_field_and_writes_nothing(configured, tmp_path):
    doc = yaml.safe_load(_run("export"))
    doc["providers"][0]["timeout_s"] = 42.5
    doc["static_answers"].append({"question": "Do you ship on Sundays?", "answer": "No."})
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    name = doc["providers"][0]["name"]
    before_timeout = Provider.objects.get(name=name).timeout_s
    stand = config_change_high_water()

    out = _run("apply", str(path), "--dry-run")

    assert f"~ providers name='{name}'" in out
    assert f"    timeout_s: {json.dumps(before_timeout)} → 42.5" in out
    assert "+ static_answers question='Do you ship on Sundays?'" in out
    assert out.strip().endswith("2 rows would change (dry run)")
    assert Provider.objects.get(name=name).timeout_s == before_timeout
    assert not StaticAnswer.objects.filter(question="Do you ship on Sundays?").exists()
    assert config_change_high_water() == stand


def test_each_change_is_recorded_as_from_the_file_and_moves_the_config_version(
    configured, tmp_path, django_capture_on_commit_callbacks
):
    doc = yaml.safe_load(_run("export"))
    doc["providers"][0]["timeout_s"] = 42.5
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    last = ConfigChange.objects.order_by("-id").first()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        _run("apply", str(path))

    [change] = ConfigChange.objects.filter(id__gt=last.id)
    assert change.reason == "applied from staging.yaml"
    assert change.actor_name == "config apply"
    assert change.after == {"timeout_s": 42.5}
    assert callbacks, "the serving processes are told once the apply commits"


def test_a_row_that_does_not_validate_names_its_row_and_field_and_nothing_is_applied(
    configured, tmp_path
):
    doc = yaml.safe_load(_run("export"))
    doc["static_answers"].append({"question": "Fresh question?", "answer": "Fine."})
    doc["providers"][-1]["timeout_s"] = -3
    bad = doc["providers"][-1]["name"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    stand = config_change_high_water()

    with pytest.raises(CommandError) as caught:
        _run("apply", str(path))

    message = str(caught.value)
    assert f"providers name='{bad}': timeout_s:" in message
    assert message.endswith("Nothing was applied.")
    assert not StaticAnswer.objects.filter(question="Fresh question?").exists()
    assert config_change_high_water() == stand


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["providers"][0].update(colour="blue"), "no such field: colour"),
        (
            lambda d: d["aliases"][0]["entries"][0].update(provider="nowhere"),
            "provider names 'nowhere', which is not a provider",
        ),
        (lambda d: d.update(version=9), "not a configuration file of this format"),
        (
            lambda d: d["policy"].update(kill_switch="static_only"),
            "policy: kill_switch: the kill switch is not configuration",
        ),
        (lambda d: d.update(extras=[]), "no such section: extras"),
        (lambda d: d.update(providers={}), "providers: expected a list of rows"),
    ],
)
def test_a_file_that_makes_no_sense_is_refused_with_a_reason(configured, tmp_path, edit, expected):
    doc = yaml.safe_load(_run("export"))
    edit(doc)
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(CommandError, match=expected):
        _run("apply", str(path))


def test_prune_removes_what_the_file_leaves_out(configured, tmp_path):
    doc = yaml.safe_load(_run("export"))
    dropped = doc["static_answers"].pop()["question"]
    doc["client_apps"] = []
    doc["alert_channels"] = []
    path = tmp_path / "smaller.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")

    kept = _run("apply", str(path))
    assert "0 rows changed" in kept, "without --prune nothing goes"
    out = _run("apply", str(path), "--prune")

    assert f"- static_answers question='{dropped}'" in out
    assert not StaticAnswer.objects.filter(question=dropped).exists()
    assert not AlertChannel.objects.exists()
    # A client app is revoked, not deleted: its ledger rows and budgets keep their subject.
    assert ClientApp.objects.get(name="web").revoked_at is not None
    assert "- client_apps name='web'" in out
    # And a revoked app's name is not taken again by a later file.
    doc["client_apps"] = [{"name": "web"}]
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(CommandError, match="revoked in this database"):
        _run("apply", str(path))


def test_an_alias_entries_are_replaced_as_the_file_lists_them(configured, tmp_path):
    doc = yaml.safe_load(_run("export"))
    alias = doc["aliases"][0]
    taken = {entry["provider"] for entry in alias["entries"]}
    other = next(p["name"] for p in doc["providers"] if p["name"] not in taken)
    alias["entries"] = [{"provider": other, "model": "", "position": 0}] + [
        {**entry, "position": place + 1} for place, entry in enumerate(alias["entries"])
    ]
    path = tmp_path / "aliases.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")

    out = _run("apply", str(path))

    assert f"~ aliases name='{alias['name']}'" in out
    stored = [
        {"provider": e.provider.name, "model": e.model, "position": e.position}
        for e in AliasEntry.objects.filter(alias__name=alias["name"]).order_by("position")
    ]
    assert stored == alias["entries"]
