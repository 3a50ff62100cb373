"""Client apps: made with a new key (shown once, only its digest kept), revoked, listed."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from gateway.engine.clients import key_new
from providers.models import ChangeAction, ClientApp
from providers.services.audit import Actor, config_change_record, instance_snapshot


@transaction.atomic
def client_app_create(
    *, actor: Actor, app: ClientApp | None = None, reason: str = "", **values: Any
) -> tuple[ClientApp, str]:
    """Save a new client app (`app`, its fields set by a form, or one made from `values`) with
    a freshly made key: answers the app and the key, which exists nowhere else after this."""
    app = app if app is not None else ClientApp(**values)
    key, app.key_prefix, app.key_digest = key_new()
    app.full_clean()
    app.save()
    config_change_record(
        target=app,
        action=ChangeAction.CREATE,
        before=None,
        after=instance_snapshot(app),
        actor=actor,
        reason=reason,
    )
    return app, key


@transaction.atomic
def client_app_revoke(*, app: ClientApp, actor: Actor, reason: str = "") -> bool:
    """Revoke the app's key for good (every process refuses it once the change reaches it);
    False if it already was."""
    locked = ClientApp.objects.select_for_update().get(pk=app.pk)
    if locked.revoked_at is not None:
        return False
    before = instance_snapshot(locked)
    locked.revoked_at = timezone.now()
    locked.save(update_fields=["revoked_at", "updated_at"])
    app.revoked_at = locked.revoked_at
    config_change_record(
        target=locked,
        action=ChangeAction.UPDATE,
        before=before,
        after=instance_snapshot(locked),
        actor=actor,
        reason=reason or "key revoked",
    )
    return True
