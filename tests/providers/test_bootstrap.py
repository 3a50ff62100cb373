from __future__ import annotations

import io
import json
import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from billing.models import Budget
from providers.models import ChangeAction, ConfigChange, FailoverPolicy, Provider, StaticAnswer
from providers.services.seeding import DEFAULT_ANSWERS_FILE

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def _bootstrap(*args: str) -> str:
    out = io.StringIO()
    call_command("bootstrap", *args, stdout=out)
    return out.getvalue()


class TestStaticAnswersShipped:
    def test_the_file_holds_fifty_distinct_answers(self):
        entries = json.loads(DEFAULT_ANSWERS_FILE.read_text(encoding="utf-8"))
        assert len(entries) == 50
        questions = {entry["question"].casefold() for entry in entries}
        assert len(questions) == 50
        assert all(entry["answer"].strip() and entry["alternatives"] for entry in entries)

    def test_setup_loads_the_fifty_answers_and_the_policy(self):
        output = _bootstrap()
        assert "Loaded 50 static answers." in output
        assert StaticAnswer.objects.filter(enabled=True).count() == 50
        assert FailoverPolicy.objects.count() == 1
        hours = StaticAnswer.objects.get(question__icontains="hours")
        assert len(hours.phrasings) >= 4

    def test_answers_are_loaded_once_and_a_deleted_one_stays_deleted(self):
        _bootstrap()
        StaticAnswer.objects.order_by("pk").first().delete()
        assert "static answers" not in _bootstrap()
        assert StaticAnswer.objects.count() == 49

    def test_loading_is_on_the_change_record(self):
        _bootstrap()
        seed = ConfigChange.objects.get(
            action=ChangeAction.SEED, target_type="providers.staticanswer"
        )
        assert seed.after == {"count": 50}
        assert seed.actor_name == "system"


class TestDemoConfiguration:
    @pytest.fixture(autouse=True)
    def _embedded(self, settings):
        # The embedded mode, on whichever database this pass runs (the test runner turns DEBUG
        # off; a serving process's DEBUG is the environment's).
        settings.DEBUG, settings.STATE_BACKEND, settings.REDIS_URL = True, "memory", ""

    def test_it_loads_an_ollama_primary_an_openai_secondary_and_a_disabled_anthropic(self):
        _bootstrap("--demo")
        providers = list(Provider.objects.order_by("priority"))
        assert [(p.kind, p.enabled, p.is_local) for p in providers] == [
            ("ollama", True, True),
            ("openai", True, False),
            ("anthropic", False, False),
        ]
        primary, secondary, _ = providers
        assert (primary.base_url, primary.model) == ("http://127.0.0.1:11434", "llama3.1:8b")
        assert (secondary.model, secondary.api_key_env) == ("gpt-4o-mini", "OPENAI_API_KEY")
        assert secondary.price_input_per_1m > 0
        assert Budget.objects.filter(scope="all").count() == 2
        assert Budget.objects.filter(scope="provider", provider=secondary).exists()

    def test_it_creates_an_admin_once_and_prints_the_password_once(self):
        first = _bootstrap("--demo")
        assert "username: admin" in first
        password = first.split("password: ")[1].split()[0]
        admin = get_user_model().objects.get(username="admin")
        assert admin.is_superuser and admin.is_staff and admin.check_password(password)
        second = _bootstrap("--demo")
        assert "password" not in second
        assert get_user_model().objects.count() == 1

    def test_it_is_loaded_once_and_removed_providers_stay_removed(self):
        _bootstrap("--demo")
        Budget.objects.all().delete()
        Provider.objects.filter(name="anthropic-cloud").delete()
        _bootstrap("--demo")
        assert not Provider.objects.filter(name="anthropic-cloud").exists()
        assert Budget.objects.count() == 0

    def test_each_demo_row_is_on_the_change_record(self):
        _bootstrap("--demo")
        created = ConfigChange.objects.filter(action=ChangeAction.CREATE)
        assert created.filter(target_type="providers.provider").count() == 3
        assert created.filter(target_type="billing.budget").count() == 3
        assert all(change.reason == "demo configuration" for change in created)

    def test_it_refuses_outside_the_embedded_mode(self, settings):
        settings.STATE_BACKEND, settings.REDIS_URL = "redis", "redis://127.0.0.1:6379/13"
        with pytest.raises(CommandError, match="embedded mode"):
            _bootstrap("--demo")
        assert not Provider.objects.exists()
        assert not get_user_model().objects.exists()

    def test_it_refuses_in_a_production_deployment_before_writing_anything(self, settings):
        settings.DEBUG = False
        with pytest.raises(CommandError, match="production deployment"):
            _bootstrap("--demo")
        assert not FailoverPolicy.objects.exists()
        assert not StaticAnswer.objects.exists()
        assert not get_user_model().objects.exists()


def _production_env(data_dir: Path) -> dict[str, str]:
    """What a production deployment sets (docs/operations.md, "Running in production"), on a
    SQLite file of its own: nothing here reaches this pass's database or Redis."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
    }
    env.update(
        ENV_FILE="",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="gateway.example.com",
        DATA_DIR=str(data_dir),
    )
    return env


@pytest.mark.backend_free
def test_demo_in_a_production_deployment_refuses_in_one_line_and_writes_nothing(tmp_path):
    env = _production_env(tmp_path)
    manage = [sys.executable, "manage.py"]
    subprocess.run(
        [*manage, "migrate", "--noinput", "-v", "0"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    done = subprocess.run(
        [*manage, "bootstrap", "--demo"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("CommandError: bootstrap --demo is for the embedded mode only")
    assert "production deployment (DEBUG=false)" in line
    assert done.stdout == ""
    with sqlite3.connect(tmp_path / "failover.sqlite3") as database:
        for table in ("providers_failoverpolicy", "providers_staticanswer", "auth_user"):
            assert database.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
