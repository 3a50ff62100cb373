"""The operators' actions on providers: enable or disable, move in priority, and override the
breaker. Each is recorded in `ConfigChange` in the same transaction as the change itself."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from gateway.engine.breaker import Mode
from gateway.state.contract import StateStore
from providers.models import ChangeAction, Incident, IncidentClosedReason, KillSwitch, Provider
from providers.selectors import policy_get
from providers.services.audit import Actor, config_change_record, instance_snapshot


def _update(provider: Provider, actor: Actor, **values: Any) -> None:
    before = instance_snapshot(provider)
    for name, value in values.items():
        setattr(provider, name, value)
    provider.save(update_fields=[*values, "updated_at"])
    config_change_record(
        target=provider,
        action=ChangeAction.UPDATE,
        before=before,
        after=instance_snapshot(provider),
        actor=actor,
    )


def provider_enable(*, provider: Provider, enabled: bool, actor: Actor) -> None:
    """Raises ValidationError when disabling the provider the kill switch forces traffic to:
    every request would silently fall to the static tier."""
    with transaction.atomic():
        policy = policy_get()
        if (
            not enabled
            and policy.kill_switch == KillSwitch.FORCE_PROVIDER
            and policy.kill_switch_provider_id == provider.pk
        ):
            raise ValidationError(
                f"The kill switch forces all traffic to {provider.name}: change the kill switch "
                "before disabling it."
            )
        _update(provider, actor, enabled=enabled)


def provider_move(*, provider: Provider, direction: str, actor: Actor) -> bool:
    """Swap priorities with the neighbour above ("up") or below ("down"); False at the end."""
    with transaction.atomic():
        ordered = list(Provider.objects.select_for_update().order_by("priority", "name"))
        index = next(i for i, row in enumerate(ordered) if row.pk == provider.pk)
        other_index = index - 1 if direction == "up" else index + 1
        if not 0 <= other_index < len(ordered):
            return False
        this, other = ordered[index], ordered[other_index]
        if this.priority == other.priority:  # a tie: open a gap so the order is explicit
            this_priority = other.priority - 1 if direction == "up" else other.priority + 1
            _update(this, actor, priority=max(0, this_priority))
        else:
            this_priority, other_priority = other.priority, this.priority
            _update(this, actor, priority=this_priority)
            _update(other, actor, priority=other_priority)
    return True


def breaker_set_mode(
    *, provider: Provider, mode: Mode, actor: Actor, store: StateStore, reason: str = ""
) -> None:
    """Reset the breaker (back to automatic, closed), force it open, or ignore it. The change
    is recorded (and an incident it ends is closed) in one transaction; the breaker moves in
    the shared state once that has committed, so every process sees it at once and the record
    never claims a move that was rolled back."""
    before, _ = async_to_sync(store.read)(provider.name)
    shown = {Mode.AUTO: "closed", Mode.DISABLED: "forced open", Mode.FORCED_CLOSED: "ignored"}
    name = provider.name
    with transaction.atomic():
        # Registered first, so it runs before the record's own on-commit work (the config
        # version, which makes every process read its breakers afresh).
        transaction.on_commit(lambda: async_to_sync(store.set_mode)(name, mode))
        config_change_record(
            target=provider,
            action=ChangeAction.BREAKER,
            before={"state": before.state.value, "mode": before.mode.value},
            after={"state": shown[mode], "mode": mode.value},
            actor=actor,
            reason=reason,
        )
        # The breaker was reset without an event of its own: an incident it had open ends here
        # (left open, it would swallow the next real outage as a re-opening of this one).
        Incident.objects.filter(provider=name, ended_at__isnull=True).update(
            ended_at=timezone.now(), closed_reason=IncidentClosedReason.OPERATOR
        )
