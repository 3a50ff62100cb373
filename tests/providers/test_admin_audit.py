"""Every operator change made through the admin lands in ConfigChange: who, what, before, after."""

from __future__ import annotations

import pytest
from django.urls import reverse

from providers.models import ChangeAction, ConfigChange, FailoverPolicy, Provider, StaticAnswer
from providers.selectors import policy_get
from tests.admin_forms import change_form_data
from tests.factories import make_provider, make_static_answer, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, admin_user):
    client.force_login(admin_user)
    return admin_user


def _policy_url() -> str:
    return reverse("admin:providers_failoverpolicy_change", args=[policy_get().pk])


class TestProviders:
    def test_an_edit_records_only_the_fields_that_moved(self, client, operator):
        provider = make_provider(name="ollama-gpu", timeout_s=15.0)
        url = reverse("admin:providers_provider_change", args=[provider.pk])
        response = client.post(url, change_form_data(client, url, timeout_s="9.5", enabled=False))
        assert response.status_code == 302
        change = ConfigChange.objects.get()
        assert (change.action, change.actor, change.actor_name) == ("update", operator, "admin")
        assert (change.target_type, change.target_id) == ("providers.provider", str(provider.pk))
        assert change.before == {"timeout_s": 15.0, "enabled": True}
        assert change.after == {"timeout_s": 9.5, "enabled": False}

    def test_saving_without_a_change_records_nothing(self, client, operator):
        provider = make_provider()
        url = reverse("admin:providers_provider_change", args=[provider.pk])
        client.post(url, change_form_data(client, url))
        assert not ConfigChange.objects.exists()

    def test_adding_and_deleting_are_recorded(self, client, operator):
        add_url = reverse("admin:providers_provider_add")
        data = change_form_data(
            client,
            add_url,
            name="vllm-box",
            kind="openai",
            base_url="http://127.0.0.1:8000",
            model="qwen2.5-7b",
            priority="40",
        )
        assert client.post(add_url, data).status_code == 302
        provider = Provider.objects.get(name="vllm-box")
        created = ConfigChange.objects.get(action=ChangeAction.CREATE)
        assert created.after["model"] == "qwen2.5-7b" and created.before is None
        delete_url = reverse("admin:providers_provider_delete", args=[provider.pk])
        assert client.post(delete_url, {"post": "yes"}).status_code == 302
        deleted = ConfigChange.objects.get(action=ChangeAction.DELETE)
        assert deleted.before["name"] == "vllm-box" and deleted.after is None

    def test_the_list_toggle_is_recorded(self, client, operator):
        provider = make_provider(enabled=True, priority=10)
        data = {
            "form-TOTAL_FORMS": "1",
            "form-INITIAL_FORMS": "1",
            "form-0-id": str(provider.pk),
            "form-0-priority": "15",
            "_save": "Save",
        }
        response = client.post(reverse("admin:providers_provider_changelist"), data)
        assert response.status_code == 302
        provider.refresh_from_db()
        assert (provider.enabled, provider.priority) == (False, 15)
        change = ConfigChange.objects.get()
        assert change.before == {"enabled": True, "priority": 10}
        assert change.after == {"enabled": False, "priority": 15}

    def test_an_invalid_url_is_refused_with_the_reason_and_nothing_changes(self, client, operator):
        provider = make_provider(base_url="http://127.0.0.1:11434")
        url = reverse("admin:providers_provider_change", args=[provider.pk])
        response = client.post(url, change_form_data(client, url, base_url="ftp://models.example"))
        assert response.status_code == 200
        assert "Enter an http:// or https:// URL." in response.content.decode()
        provider.refresh_from_db()
        assert provider.base_url == "http://127.0.0.1:11434"
        assert not ConfigChange.objects.exists()

    def test_the_api_key_never_appears_on_a_page(self, client, operator, monkeypatch):
        monkeypatch.setenv("FAILOVER_SECRET_DEMO_KEY_VAR", "sk-live-do-not-show")
        provider = make_provider(kind="openai", api_key_env="FAILOVER_SECRET_DEMO_KEY_VAR")
        url = reverse("admin:providers_provider_change", args=[provider.pk])
        page = client.get(url).content.decode()
        listing = client.get(reverse("admin:providers_provider_changelist")).content.decode()
        assert "sk-live-do-not-show" not in page + listing
        assert "FAILOVER_SECRET_DEMO_KEY_VAR" in page


class TestPolicy:
    def test_there_is_no_add_or_delete_and_the_list_opens_the_one_row(self, client, operator):
        assert client.get(reverse("admin:providers_failoverpolicy_add")).status_code == 403
        response = client.get(reverse("admin:providers_failoverpolicy_changelist"))
        assert response.status_code == 302 and response["Location"] == _policy_url()
        delete = reverse("admin:providers_failoverpolicy_delete", args=[policy_get().pk])
        assert client.post(delete, {"post": "yes"}).status_code == 403
        assert FailoverPolicy.objects.count() == 1

    def test_an_invalid_threshold_shows_the_error_and_saves_nothing(self, client, operator):
        url = _policy_url()
        response = client.post(
            url, change_form_data(client, url, cooldown_s="300", max_cooldown_s="120")
        )
        assert response.status_code == 200
        assert "cannot be below the base cooldown" in response.content.decode()
        assert policy_get().max_cooldown_s == 600
        assert not ConfigChange.objects.exists()

    def test_a_threshold_change_is_recorded(self, client, operator):
        url = _policy_url()
        client.post(url, change_form_data(client, url, consecutive_failures="5"))
        change = ConfigChange.objects.get()
        assert (change.action, change.before, change.after) == (
            "update",
            {"consecutive_failures": 3},
            {"consecutive_failures": 5},
        )

    def test_flipping_the_kill_switch_is_its_own_record_with_the_reason(self, client, operator):
        url = _policy_url()
        data = change_form_data(
            client,
            url,
            kill_switch="static_only",
            kill_switch_reason="GPU node on fire",
            flap_window_s="90",
        )
        assert client.post(url, data).status_code == 302
        switch = ConfigChange.objects.get(action=ChangeAction.KILL_SWITCH)
        assert switch.reason == "GPU node on fire"
        assert (
            switch.before["kill_switch"] == "off" and switch.after["kill_switch"] == "static_only"
        )
        thresholds = ConfigChange.objects.get(action=ChangeAction.UPDATE)
        assert thresholds.after == {"flap_window_s": 90}

    def test_the_kill_switch_needs_a_reason(self, client, operator):
        url = _policy_url()
        response = client.post(url, change_form_data(client, url, kill_switch="static_only"))
        assert "Say why the kill switch is set." in response.content.decode()
        assert policy_get().kill_switch == "off"

    def test_without_the_permission_the_kill_switch_cannot_be_flipped(self, client):
        user = make_user(perms=("providers.view_failoverpolicy", "providers.change_failoverpolicy"))
        client.force_login(user)
        url = _policy_url()
        data = change_form_data(client, url, flap_window_s="90")
        data.update(kill_switch="static_only", kill_switch_reason="not mine to flip")
        assert client.post(url, data).status_code == 302
        policy = policy_get()
        assert (policy.kill_switch, policy.flap_window_s) == ("off", 90)
        assert not ConfigChange.objects.filter(action=ChangeAction.KILL_SWITCH).exists()


class TestStaticAnswers:
    def test_an_edit_is_recorded_and_signed(self, client, operator):
        answer = make_static_answer(answer="We open at nine.")
        url = reverse("admin:providers_staticanswer_change", args=[answer.pk])
        client.post(url, change_form_data(client, url, answer="We open at eight."))
        answer.refresh_from_db()
        assert answer.updated_by == operator
        change = ConfigChange.objects.get()
        assert change.after == {"answer": "We open at eight."}

    def test_a_bulk_delete_records_each_answer(self, client, operator):
        answers = [make_static_answer() for _ in range(3)]
        response = client.post(
            reverse("admin:providers_staticanswer_changelist"),
            {
                "action": "delete_selected",
                "_selected_action": [a.pk for a in answers],
                "post": "yes",
            },
        )
        assert response.status_code == 302
        assert not StaticAnswer.objects.exists()
        deleted = ConfigChange.objects.filter(action=ChangeAction.DELETE)
        assert sorted(c.before["question"] for c in deleted) == sorted(a.question for a in answers)
