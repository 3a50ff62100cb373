"""The operators' actions from the control room. Each one is recorded in `ConfigChange` in the
same transaction as the change itself, and moves the config version, so every serving process
acts on it within a second."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from ..breaker import Mode
from ..gateway import get_gateway
from ..models import ChangeAction, FailoverPolicy, Incident, KillSwitch, Provider
from ..selectors import policy_get
from ..services import Actor, config_change_record, instance_snapshot

MAX_REASON_CHARS = 2000


def kill_switch_set(
    *, mode: str, provider: Provider | None, reason: str, actor: Actor
) -> FailoverPolicy:
    """Flip the kill switch. Raises ValidationError (by field) when the request doesn't hold."""
    reason = reason.strip()
    errors: dict[str, str] = {}
    if mode not in KillSwitch.values:
        errors["mode"] = "Choose normal routing, static answers only, or one provider."
    if not reason:
        errors["reason"] = "Say why: the reason goes on the record with the change."
    elif len(reason) > MAX_REASON_CHARS:
        errors["reason"] = f"Keep the reason under {MAX_REASON_CHARS} characters."
    if mode == KillSwitch.FORCE_PROVIDER and provider is None:
        errors["provider"] = "Choose the provider that should take all traffic."
    elif mode == KillSwitch.FORCE_PROVIDER and provider is not None and not provider.enabled:
        errors["provider"] = (
            f"{provider.name} is disabled: forcing traffic to it would send every request to "
            "the static answers. Enable it first, or choose static answers only."
        )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        policy = FailoverPolicy.objects.select_for_update().get(pk=policy_get().pk)
        before = {
            "kill_switch": policy.kill_switch,
            "kill_switch_provider_id": policy.kill_switch_provider_id,
        }
        policy.kill_switch = mode
        policy.kill_switch_provider = provider if mode == KillSwitch.FORCE_PROVIDER else None
        policy.kill_switch_reason = reason
        policy.full_clean()
        policy.save()
        config_change_record(
            target=policy,
            action=ChangeAction.KILL_SWITCH,
            before=before,
            after={
                "kill_switch": policy.kill_switch,
                "kill_switch_provider_id": policy.kill_switch_provider_id,
            },
            actor=actor,
            reason=reason,
        )
    return policy


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


def provider_enable(provider: Provider, enabled: bool, actor: Actor) -> None:
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


def provider_move(provider: Provider, direction: str, actor: Actor) -> bool:
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


def breaker_set_mode(provider: Provider, mode: Mode, actor: Actor, reason: str = "") -> None:
    """Reset the breaker (back to automatic, closed), force it open, or ignore it: in the
    shared state, so every process sees it at once."""
    gateway = get_gateway()
    before, _ = async_to_sync(gateway.store.read)(provider.name)
    async_to_sync(gateway.store.set_mode)(provider.name, mode)
    shown = {Mode.AUTO: "closed", Mode.DISABLED: "forced open", Mode.FORCED_CLOSED: "ignored"}
    with transaction.atomic():
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
        Incident.objects.filter(provider=provider.name, ended_at__isnull=True).update(
            ended_at=timezone.now()
        )
