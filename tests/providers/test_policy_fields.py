"""One source for each threshold: the model's field is what the admin, the thresholds editor and
the engine's snapshot all read, and these tests say where a new one is missing."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from gateway.engine.config import PolicyConfig
from providers.models import FailoverPolicy
from providers.selectors import policy_config, policy_get
from providers.services.policy import threshold_groups, threshold_names

pytestmark = pytest.mark.django_db

ENGINE_FIELDS = {item.name for item in fields(PolicyConfig)}
MODEL_FIELDS = {field.name for field in FailoverPolicy._meta.concrete_fields}


def _grouped() -> list[str]:
    names: list[str] = []
    for _, lines in FailoverPolicy.FIELD_GROUPS:
        for line in lines:
            names += list(line) if isinstance(line, tuple) else [line]
    return names


def test_every_policy_field_reaches_the_engine_or_is_named_the_control_planes_own():
    assert MODEL_FIELDS - set(FailoverPolicy.NOT_IN_SNAPSHOT) == ENGINE_FIELDS
    assert set(FailoverPolicy.NOT_IN_SNAPSHOT) <= MODEL_FIELDS


def test_every_editable_policy_field_has_its_place_in_the_layout_once():
    grouped = _grouped()
    assert len(grouped) == len(set(grouped))
    assert set(grouped) == MODEL_FIELDS - {"id", "updated_at"}


def test_the_engines_defaults_are_the_models():
    row = FailoverPolicy()
    built = policy_config(row, forced_provider="")
    for item in fields(PolicyConfig):
        if item.default is not MISSING:
            assert getattr(built, item.name) == item.default, item.name


def test_the_snapshot_takes_each_threshold_from_the_row_by_name():
    row = policy_get()
    row.consecutive_failures = 7
    row.hedge_after_ms = 450
    row.local_only_tasks = "billing, support"
    row.sentinel_paid_probe = True
    built = policy_config(row, forced_provider="ollama-local")
    assert built.consecutive_failures == 7
    assert built.hedge_after_ms == 450
    assert built.local_only_tasks == frozenset({"billing", "support"})
    assert built.sentinel_paid_probe is True
    assert built.kill_switch_provider == "ollama-local"


def test_the_thresholds_editor_shows_every_field_but_the_kill_switch_in_the_models_groups():
    names = threshold_names()
    assert set(names) == MODEL_FIELDS - {"id", "updated_at", *FailoverPolicy.KILL_SWITCH_FIELDS}
    groups = threshold_groups()
    assert [title for title, _ in groups] == [
        title for title, _ in FailoverPolicy.FIELD_GROUPS if title != "Kill switch"
    ]
    assert "Other" not in dict(groups)
