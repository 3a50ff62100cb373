"""The configuration as a file between two deployments: exported from one database, applied to
another that holds nothing, and exported again from there, as an operator runs the commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.project import ROOT

pytestmark = pytest.mark.backend_free


def _deployment(data_dir: Path) -> dict[str, str]:
    """An embedded deployment of its own (a SQLite file in `data_dir`), whatever this pass runs
    against."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}
        and not key.startswith("OTEL_")
    }
    env.update(ENV_FILE="", DEBUG="true", DATA_DIR=str(data_dir))
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_a_file_exported_from_one_database_rebuilds_another(tmp_path):
    staging, production = _deployment(tmp_path / "staging"), _deployment(tmp_path / "production")
    for env in (staging, production):
        _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(staging, "bootstrap", "--demo")  # the 50 answers, providers, aliases, budgets, an app
    exported = tmp_path / "staging.yaml"
    _manage(staging, "config", "export", "--output", str(exported))

    dry = _manage(production, "config", "apply", str(exported), "--dry-run")
    applied = _manage(production, "config", "apply", str(exported))
    again = tmp_path / "production.yaml"
    _manage(production, "config", "export", "--output", str(again))

    assert again.read_text(encoding="utf-8") == exported.read_text(encoding="utf-8")
    changed = applied.stdout.strip().splitlines()
    assert dry.stdout.splitlines()[:-1] == changed[: len(dry.stdout.splitlines()) - 1]
    assert any(line.startswith("+ static_answers question=") for line in changed)
    # The demo's client app got a key of its own in production, printed once.
    assert any(
        line.startswith("client app demo: its key, shown this once: fgw_") for line in changed
    )
    # Applying it again changes nothing.
    assert _manage(production, "config", "apply", str(exported)).stdout.strip() == "0 rows changed"
