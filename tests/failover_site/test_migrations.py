"""Every model change ships with its migration: a deploy's `migrate` is the whole schema."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_is_missing_its_migration():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit as exc:  # --check exits non-zero when a migration is missing
        pytest.fail(f"a migration is missing:\n{out.getvalue()}" if exc.code else "")
