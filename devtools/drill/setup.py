"""The drill's configuration of the gateway it starts itself, run inside that gateway's
environment (`manage.py shell -c`, before the serving processes start): the migrations, the
policy row, the static answers and the demo providers, the demo providers pointed at the
drill's fake providers, the scenario's settings, and a client app for the load with its key.

Every change is recorded (a `ConfigChange`), as an operator's would be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.db import transaction

from billing.seeding import demo_configuration_load
from providers.models import ChangeAction, Provider
from providers.selectors import policy_get
from providers.services.audit import config_change_record, instance_snapshot
from providers.services.client_apps import client_app_create
from providers.services.seeding import static_answers_load_defaults

# The demo configuration's providers by role (providers/services/seeding.py DEMO_PROVIDERS).
ROLES = {"primary": "ollama-local", "secondary": "openai-cloud"}
CLIENT_NAME = "drill"


def prepare(
    *,
    urls: dict[str, str],
    policy: dict[str, Any],
    provider_changes: dict[str, dict[str, Any]],
) -> str:
    """Configure the drill's gateway (a fresh database); answers the drill client's key."""
    with transaction.atomic():
        policy_get()
        static_answers_load_defaults()
        demo_configuration_load()
        for role, name in ROLES.items():
            _change(Provider.objects.get(name=name), {"base_url": urls[role], "enabled": True})
        for role, changes in provider_changes.items():
            _change(Provider.objects.get(name=ROLES[role]), changes)
        if policy:
            _change(policy_get(), policy)
        _, key = client_app_create(
            actor=None,
            reason="drill",
            name=CLIENT_NAME,
            description="The drill's load (manage.py drill).",
            allowed_models="*",
            allow_high_priority=True,
            can_read_status=True,
            requests_per_minute=0,
            tokens_per_minute=0,
        )
    return key


def _change(row: Any, values: dict[str, Any]) -> None:
    before = instance_snapshot(row)
    for name, value in values.items():
        setattr(row, name, value)
    row.full_clean()
    row.save()
    config_change_record(
        target=row,
        action=ChangeAction.UPDATE,
        before=before,
        after=instance_snapshot(row),
        reason="drill",
    )


def main(spec_path: str, out_path: str) -> None:
    """`manage.py shell -c` entry: migrate, then the spec's JSON in, {"key": ...} out (one
    process for both: a Django start-up less)."""
    call_command("migrate", interactive=False, verbosity=0)
    spec = json.loads(Path(spec_path).read_text())
    key = prepare(
        urls=spec["urls"], policy=spec["policy"], provider_changes=spec["provider_changes"]
    )
    Path(out_path).write_text(json.dumps({"key": key, "roles": ROLES}))
