"""The status page's parts without a browser: what it shows, the kill switch and the provider
actions with their permissions and records, incidents from breaker events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from control_room.dashboard import control_status, health_of
from gateway.engine.breaker import BreakerEvent, BreakerState, EventKind, Mode, State
from gateway.engine.health import DEGRADED, DISABLED, DOWN, HEALTHY
from gateway.state.contract import WindowSummary
from providers.models import ConfigChange, FailoverPolicy, Incident, Provider
from providers.selectors import policy_get
from providers.services import policy as policy_services
from providers.services import provider_actions
from runtime.incidents import incidents_record
from tests.control.conftest import status_permission
from tests.factories import make_call_record, make_provider, make_user
from tests.serving import ServingClient

pytestmark = pytest.mark.django_db

QUIET = WindowSummary(calls=0, failures=0, failure_rate_pct=0.0, p95_ms=None, calls_per_minute=0)


@pytest.fixture
def client(serving_client) -> ServingClient:
    return serving_client


@pytest.fixture
def local():
    return make_provider(name="ollama-local", priority=10)


@pytest.fixture
def cloud():
    return make_provider(
        name="openai-cloud", kind="openai", model="gpt-4o-mini", priority=20, is_local=False
    )


@pytest.fixture
def operator_client(client):
    status_permission()
    user = make_user(
        username="ops",
        perms=(
            "providers.view_status",
            "providers.view_provider",
            "providers.change_provider",
            "providers.flip_kill_switch",
            "providers.view_failoverpolicy",
        ),
    )
    client.force_login(user)
    return client


class TestHealth:
    def test_a_quiet_closed_breaker_is_healthy(self):
        assert health_of(BreakerState(), QUIET, enabled=True) == HEALTHY

    def test_recent_failures_make_it_degraded(self):
        assert health_of(BreakerState(consecutive_failures=1), QUIET, True) == DEGRADED
        assert health_of(BreakerState(state=State.HALF_OPEN), QUIET, True) == DEGRADED

    def test_an_open_or_forced_open_breaker_is_down(self):
        assert health_of(BreakerState(state=State.OPEN), QUIET, True) == DOWN
        assert health_of(BreakerState(mode=Mode.DISABLED), QUIET, True) == DOWN

    def test_a_disabled_provider_is_shown_as_disabled(self):
        assert health_of(BreakerState(), QUIET, enabled=False) == DISABLED


class TestServingNow:
    def test_the_healthy_primary_serves(self, local, cloud, gateway):
        serving = control_status(gateway).serving
        assert (serving.tier, serving.provider) == ("primary", "ollama-local")

    def test_an_open_primary_hands_over_to_the_secondary_and_says_why(
        self, local, cloud, gateway, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            provider_actions.breaker_set_mode(
                provider=local, mode=Mode.DISABLED, actor=None, store=gateway.store
            )
        serving = control_status(gateway).serving
        assert (serving.tier, serving.provider) == ("secondary", "openai-cloud")
        assert "ollama-local: breaker forced open" in serving.why

    def test_with_every_breaker_open_the_static_tier_serves(
        self, local, cloud, django_capture_on_commit_callbacks, gateway
    ):
        with django_capture_on_commit_callbacks(execute=True):
            for provider in (local, cloud):
                provider_actions.breaker_set_mode(
                    provider=provider, mode=Mode.DISABLED, actor=None, store=gateway.store
                )
        assert control_status(gateway).serving.tier == "static"

    def test_a_breaker_override_that_is_rolled_back_leaves_the_breaker_alone(self, local, gateway):
        from asgiref.sync import async_to_sync
        from django.db import transaction

        with pytest.raises(RuntimeError), transaction.atomic():
            provider_actions.breaker_set_mode(
                provider=local, mode=Mode.DISABLED, actor=None, store=gateway.store
            )
            raise RuntimeError("the transaction fails after the override")
        state, _ = async_to_sync(gateway.store.read)("ollama-local")
        assert state.mode == Mode.AUTO
        assert not ConfigChange.objects.filter(action="breaker").exists()

    def test_the_kill_switch_decides_first(self, local, cloud, gateway):
        policy_services.kill_switch_set(
            mode="static_only", provider=None, reason="drill", actor=None
        )
        serving = control_status(gateway).serving
        assert serving.tier == "static" and "kill switch" in serving.why

    def test_cloud_share_counts_todays_requests_served_by_cloud_providers(
        self, local, cloud, gateway
    ):
        make_call_record(final_provider="ollama-local")
        make_call_record(final_provider="ollama-local")
        make_call_record(final_provider="ollama-local")
        make_call_record(final_provider="openai-cloud", tier="secondary")
        status = control_status(gateway)
        assert status.requests_today == 4 and status.cloud_share_pct == 25.0


class TestKillSwitch:
    def test_a_flip_is_saved_and_recorded_with_its_reason(self, local):
        policy_services.kill_switch_set(
            mode="force_provider", provider=local, reason="cloud outage", actor=None
        )
        policy = policy_get()
        assert policy.kill_switch == "force_provider" and policy.kill_switch_provider == local
        change = ConfigChange.objects.get(action="kill_switch")
        assert change.reason == "cloud outage"
        assert change.before == {"kill_switch": "off", "kill_switch_provider_id": None}

    @pytest.mark.parametrize(
        ("mode", "provider", "reason", "field"),
        [
            ("static_only", False, "  ", "reason"),
            ("force_provider", False, "why", "provider"),
            ("sideways", False, "why", "mode"),
        ],
    )
    def test_an_incomplete_flip_is_refused_and_nothing_changes(
        self, local, mode, provider, reason, field
    ):
        with pytest.raises(ValidationError) as error:
            policy_services.kill_switch_set(
                mode=mode, provider=local if provider else None, reason=reason, actor=None
            )
        assert field in error.value.message_dict
        assert policy_get().kill_switch == "off"
        assert not ConfigChange.objects.exists()

    def test_a_disabled_provider_cannot_be_forced(self, local):
        local.enabled = False
        local.save()
        with pytest.raises(ValidationError) as error:
            policy_services.kill_switch_set(
                mode="force_provider", provider=local, reason="x", actor=None
            )
        assert "disabled" in error.value.message_dict["provider"][0]
        assert policy_get().kill_switch == "off"

    def test_the_view_answers_the_panel_or_the_errors(self, operator_client, local):
        url = "/admin/control/kill-switch/"
        refused = operator_client.post(url, {"mode": "static_only", "reason": ""})
        assert refused.status_code == 422 and b"Say why" in refused.content
        done = operator_client.post(url, {"mode": "static_only", "reason": "drill"})
        assert done.status_code == 200 and b'data-state="static_only"' in done.content

    def test_the_banner_is_on_every_admin_page_while_it_is_on(self, operator_client, local):
        assert b"kill-switch-banner" not in operator_client.get("/admin/").content
        policy_services.kill_switch_set(
            mode="static_only", provider=None, reason="drill", actor=None
        )
        for url in ("/admin/", "/admin/providers/provider/", "/admin/control/status/"):
            page = operator_client.get(url)
            if url != "/admin/control/status/":  # the partial has no page chrome
                assert b"kill-switch-banner" in page.content, url

    def test_without_the_permission_the_view_refuses(self, client, local):
        client.force_login(make_user(perms=("providers.view_provider",)))
        response = client.post("/admin/control/kill-switch/", {"mode": "off", "reason": "x"})
        assert response.status_code == 403
        assert b"kill-switch-form" not in client.get("/admin/").content

    def test_a_post_without_the_csrf_token_is_refused(self, local):
        client = Client(enforce_csrf_checks=True)
        client.force_login(make_user(perms=("providers.flip_kill_switch",)))
        response = client.post("/admin/control/kill-switch/", {"mode": "off", "reason": "x"})
        assert response.status_code == 403
        assert not ConfigChange.objects.exists()


class TestProviderActions:
    def test_disable_and_enable_are_recorded(self, operator_client, local):
        operator_client.post(f"/admin/control/providers/{local.pk}/disable/")
        local.refresh_from_db()
        assert local.enabled is False
        change = ConfigChange.objects.get()
        assert change.before == {"enabled": True} and change.after == {"enabled": False}

    def test_up_and_down_swap_priorities_and_record_both(self, operator_client, local, cloud):
        operator_client.post(f"/admin/control/providers/{cloud.pk}/up/")
        order = list(Provider.objects.order_by("priority").values_list("name", flat=True))
        assert order == ["openai-cloud", "ollama-local"]
        assert ConfigChange.objects.count() == 2
        response = operator_client.post(f"/admin/control/providers/{cloud.pk}/up/")
        assert b"already at the end" in response.content

    def test_equal_priorities_get_an_explicit_order(self, local):
        other = make_provider(name="ollama-two", priority=local.priority)
        assert provider_actions.provider_move(provider=other, direction="up", actor=None)
        other.refresh_from_db()
        assert other.priority < local.priority

    def test_force_open_and_reset_act_on_the_shared_breaker(
        self, operator_client, local, gateway, django_capture_on_commit_callbacks
    ):
        from asgiref.sync import async_to_sync

        with django_capture_on_commit_callbacks(execute=True):
            operator_client.post(f"/admin/control/providers/{local.pk}/force_open/")
        state, _ = async_to_sync(gateway.store.read)("ollama-local")
        assert state.mode == Mode.DISABLED
        with django_capture_on_commit_callbacks(execute=True):
            operator_client.post(f"/admin/control/providers/{local.pk}/reset/")
        state, _ = async_to_sync(gateway.store.read)("ollama-local")
        assert (state.mode, state.state) == (Mode.AUTO, State.CLOSED)
        changes = [c.after for c in ConfigChange.objects.order_by("created_at", "id")]
        assert changes == [
            {"state": "forced open", "mode": "disabled"},
            {"state": "closed", "mode": "auto"},
        ]

    def test_a_reset_ends_the_incident_its_breaker_had_open(self, operator_client, local):
        incidents_record([BreakerEvent(EventKind.OPENED, "ollama-local", 1_000.0, "timeout")])
        operator_client.post(f"/admin/control/providers/{local.pk}/reset/")
        ended = Incident.objects.get()
        assert ended.ended_at is not None and ended.closed_reason == "operator"
        page = operator_client.get("/admin/control/status/")
        assert b"closed by an operator" in page.content
        # The next outage is an incident of its own, not a re-opening of the old one.
        opened, _ = incidents_record(
            [BreakerEvent(EventKind.OPENED, "ollama-local", 2_000.0, "timeout")]
        )
        assert len(opened) == 1 and Incident.objects.count() == 2

    def test_the_provider_the_kill_switch_forces_cannot_be_disabled(self, operator_client, local):
        policy_services.kill_switch_set(
            mode="force_provider", provider=local, reason="x", actor=None
        )
        response = operator_client.post(f"/admin/control/providers/{local.pk}/disable/")
        assert response.status_code == 422 and b"change the kill switch" in response.content
        local.refresh_from_db()
        assert local.enabled is True

    def test_an_unknown_action_is_a_404_and_a_missing_provider_too(self, operator_client, local):
        assert (
            operator_client.post(f"/admin/control/providers/{local.pk}/explode/").status_code == 404
        )
        assert operator_client.post("/admin/control/providers/999/disable/").status_code == 404

    def test_without_the_change_permission_the_actions_are_refused(self, client, local):
        client.force_login(make_user(perms=("providers.view_provider",)))
        response = client.post(f"/admin/control/providers/{local.pk}/disable/")
        assert response.status_code == 403
        local.refresh_from_db()
        assert local.enabled is True

    def test_get_is_not_an_action(self, operator_client, local):
        response = operator_client.get(f"/admin/control/providers/{local.pk}/disable/")
        assert response.status_code == 405


class TestIncidents:
    @staticmethod
    def event(kind: EventKind, at: float, reason: str = "") -> BreakerEvent:
        return BreakerEvent(kind, "ollama-local", at, reason)

    def test_opening_starts_one_and_closing_ends_it_with_its_duration(self):
        incidents_record([self.event(EventKind.OPENED, 1_000.0, "consecutive_failures")])
        incidents_record([self.event(EventKind.OPENED, 1_060.0, "probe_failed")])
        incidents_record([self.event(EventKind.CLOSED, 1_300.0)])
        incident = Incident.objects.get()
        assert incident.started_at == datetime.fromtimestamp(1_000, UTC)
        assert incident.duration_s == 300 and incident.reopened == 1
        assert incident.reason == "consecutive_failures"

    def test_a_close_without_an_open_incident_is_ignored(self):
        incidents_record([self.event(EventKind.CLOSED, 1_000.0)])
        assert not Incident.objects.exists()

    def test_the_status_shows_the_last_incidents(self, operator_client, local):
        incidents_record([self.event(EventKind.OPENED, 1_000.0, "consecutive_failures")])
        page = operator_client.get("/admin/control/status/")
        assert b"ongoing" in page.content and b"consecutive_failures" in page.content


def test_the_status_partial_needs_a_staff_login(client):
    response = client.get("/admin/control/status/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_policy_row_is_the_one_the_kill_switch_changes():
    policy_services.kill_switch_set(mode="static_only", provider=None, reason="x", actor=None)
    assert FailoverPolicy.objects.count() == 1
