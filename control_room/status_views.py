"""The live status page (the admin's front page), its partial, the kill switch and the
provider actions. Each takes the live status's own permission: the panel shows every
provider's spend, breaker and incidents."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.views.decorators.http import require_GET, require_POST

from control_room.dashboard import control_status
from gateway.engine.breaker import Mode
from providers.form_input import FormInput
from providers.models import KillSwitch, Provider
from providers.permissions import status_viewer
from providers.services import policy, provider_actions
from runtime.gateway import Gateway, NotServing, gateway_of

KILL_SWITCH_PERMISSION = "providers.flip_kill_switch"
PROVIDER_PERMISSION = "providers.change_provider"
PROVIDER_ACTIONS = ("enable", "disable", "up", "down", "reset", "force_open")


def urls(site: AdminSite) -> list[URLPattern]:
    return [
        path("control/status/", site.admin_view(status_partial), name="control-status"),
        path("control/kill-switch/", site.admin_view(kill_switch), name="control-kill-switch"),
        path(
            "control/providers/<int:pk>/<str:action>/",
            site.admin_view(provider_action),
            name="control-provider-action",
        ),
    ]


def front_page_context(request: HttpRequest) -> dict[str, Any]:
    """The admin's front page: the live status for those who may see it."""
    if not status_viewer(request.user):
        return {"can_view_status": False}
    return {"can_view_status": True, **status_context(request)}


def _status_viewer(request: HttpRequest) -> None:
    if not status_viewer(request.user):
        raise PermissionDenied("The live status takes its own permission.")


def status_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """The panel's context; without a serving gateway (a server that ran no lifespan), the
    panel says so in place of the status."""
    user = request.user
    gateway = _gateway_or_none(request)
    return {
        "control": control_status(gateway) if gateway is not None else None,
        "can_flip": user.has_perm(KILL_SWITCH_PERMISSION),
        "can_change_providers": user.has_perm(PROVIDER_PERMISSION),
        "kill_switch_choices": KillSwitch.choices,
        "all_providers": Provider.objects.order_by("priority", "name"),
        **extra,
    }


def _gateway_or_none(request: HttpRequest) -> Gateway | None:
    try:
        return gateway_of(request)
    except NotServing:
        return None


def _panel(request: HttpRequest, status: int = 200, **extra: Any) -> TemplateResponse:
    return TemplateResponse(
        request, "control/status_panel.html", status_context(request, **extra), status=status
    )


@require_GET
def status_partial(request: HttpRequest) -> HttpResponse:
    _status_viewer(request)
    return _panel(request)


@require_POST
def kill_switch(request: HttpRequest) -> HttpResponse:
    _status_viewer(request)  # the answer is the panel
    if not request.user.has_perm(KILL_SWITCH_PERMISSION):
        raise PermissionDenied("Flipping the kill switch takes its own permission.")
    given = FormInput(request.POST)
    mode = given.text("mode", max_length=32)
    provider_id = given.object_id("provider")
    reason = given.text("reason")
    provider = Provider.objects.filter(pk=provider_id).first() if provider_id else None
    try:
        if given.errors:
            raise ValidationError(given.errors)
        policy.kill_switch_set(mode=mode, provider=provider, reason=reason, actor=request.user)
    except ValidationError as exc:
        return _panel(
            request,
            status=422,
            kill_switch_errors=exc.message_dict,
            kill_switch_form=request.POST,
        )
    return _panel(request, notice=f"Kill switch: {KillSwitch(mode).label}.")


@require_POST
def provider_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    _status_viewer(request)  # the answer is the panel
    if not request.user.has_perm(PROVIDER_PERMISSION):
        raise PermissionDenied("Changing providers takes the provider change permission.")
    if action not in PROVIDER_ACTIONS:
        return HttpResponse(f"Unknown action {action!r}.", status=404, content_type="text/plain")
    provider = get_object_or_404(Provider, pk=pk)
    user = request.user
    if action in ("enable", "disable"):
        try:
            provider_actions.provider_enable(
                provider=provider, enabled=action == "enable", actor=user
            )
        except ValidationError as exc:
            return _panel(request, status=422, notice=" ".join(exc.messages))
        notice = f"{provider.name} {action}d."
    elif action in ("up", "down"):
        moved = provider_actions.provider_move(provider=provider, direction=action, actor=user)
        notice = (
            f"{provider.name} moved {action}."
            if moved
            else f"{provider.name} is already at the end."
        )
    else:
        gateway = _gateway_or_none(request)
        if gateway is None:
            return _panel(request, status=503)  # the panel says why
        reset = action == "reset"
        provider_actions.breaker_set_mode(
            provider=provider,
            mode=Mode.AUTO if reset else Mode.DISABLED,
            actor=user,
            store=gateway.store,
        )
        notice = (
            f"{provider.name}: breaker reset (closed, automatic)."
            if reset
            else f"{provider.name}: breaker forced open; no calls go to it until reset."
        )
    return _panel(request, notice=notice)
