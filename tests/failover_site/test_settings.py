"""Settings are read in a fresh process each time, from an environment the test writes."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "gateway.example.com",
    "DATABASE_URL": "postgres://failover@db.internal:5432/failover",
    "REDIS_URL": "redis://cache.internal:6379/0",
}
SHOW_SETTINGS = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'debug': s.DEBUG, 'engine': s.DATABASES['default']['ENGINE'], "
    "'name': str(s.DATABASES['default']['NAME']), 'state': s.STATE_BACKEND, "
    "'secret': s.SECRET_KEY, 'cache': s.CACHES['default']['BACKEND'], "
    "'broker': s.CELERY_BROKER_URL, 'hosts': s.ALLOWED_HOSTS}))"
)


def _run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ENV_FILE": "",
        "DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "failover_site.settings",
        **env,
    }
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )


def _settings(env: dict[str, str], tmp_path: Path) -> dict:
    result = _run(["-c", SHOW_SETTINGS], env, tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_with_no_environment_it_runs_embedded(tmp_path):
    shown = _settings({}, tmp_path)
    assert shown["debug"] is True
    assert shown["engine"] == "django.db.backends.sqlite3"
    assert shown["name"] == str(tmp_path / "data" / "failover.sqlite3")
    assert shown["state"] == "memory"
    assert shown["cache"].endswith("LocMemCache")
    assert shown["broker"] == ""


def test_the_development_secret_is_generated_once_and_kept(tmp_path):
    first = _settings({}, tmp_path)["secret"]
    second = _settings({}, tmp_path)["secret"]
    assert first == second and len(first) >= 50
    key_file = tmp_path / "data" / "development-secret-key"
    assert key_file.stat().st_mode & 0o077 == 0


def test_database_and_redis_urls_move_it_onto_the_services(tmp_path):
    shown = _settings(PRODUCTION, tmp_path)
    assert shown["debug"] is False
    assert shown["engine"] == "django.db.backends.postgresql"
    assert shown["state"] == "redis"
    assert shown["cache"].endswith("RedisCache")
    assert shown["broker"] == PRODUCTION["REDIS_URL"]
    assert shown["hosts"] == ["gateway.example.com"]


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("SECRET_KEY", "SECRET_KEY must be set"),
        ("ALLOWED_HOSTS", "ALLOWED_HOSTS must list"),
    ],
)
def test_production_without_a_required_setting_fails_loudly(tmp_path, missing, message):
    env = {key: value for key, value in PRODUCTION.items() if key != missing}
    result = _run(["manage.py", "check"], env, tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_production_refuses_a_short_secret_key(tmp_path):
    result = _run(["manage.py", "check"], {**PRODUCTION, "SECRET_KEY": "too-short"}, tmp_path)
    assert result.returncode != 0
    assert "at least 50 characters" in result.stderr


def test_check_deploy_is_clean_with_a_production_environment(tmp_path):
    result = _run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION, tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
