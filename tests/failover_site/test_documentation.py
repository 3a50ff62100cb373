"""The README and .env.example name every variable the settings read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = (ROOT / "failover_site" / "settings.py").read_text()
READ_IN_SETTINGS = set(re.findall(r"""env(?:\.\w+)?\(\s*["']([A-Z_]+)["']""", SETTINGS)) | set(
    re.findall(r"""os\.environ\.get\(\s*["']([A-Z_]+)["']""", SETTINGS)
)


def test_the_settings_read_what_the_documentation_expects():
    assert {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= READ_IN_SETTINGS


def test_env_example_lists_every_variable():
    listed = set(re.findall(r"^#? ?([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert READ_IN_SETTINGS - listed == set()


def test_the_readme_lists_every_variable():
    readme = (ROOT / "README.md").read_text()
    assert {name for name in READ_IN_SETTINGS if f"`{name}`" not in readme} == set()
