"""Strict input, rule by rule: what `providers.form_input` refuses, and how the control room and
the admin answer a refused value (the form's own error, or a 400), with nothing saved."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.forms import modelform_factory
from django.http import QueryDict
from django.urls import reverse

from alerts.models import AlertChannel
from gateway.state.memory_store import MemoryStore
from providers.admin_audit import StrictModelForm
from providers.form_input import NUL_REFUSED, FormInput, nul_free, object_ids
from providers.models import ClientApp, ConfigChange, KillSwitch, StaticAnswer
from providers.selectors import policy_get
from runtime.gateway import Gateway
from tests.control.conftest import status_permission
from tests.factories import make_client_app, make_provider, make_static_answer
from tests.serving import ServingClient, serving


def given(query: str) -> FormInput:
    return FormInput(QueryDict(query))


class TestFormInput:
    pytestmark = pytest.mark.backend_free

    @pytest.mark.parametrize(
        "typed", ["²", "%D9%A3", "%EF%BC%91", "-1", "1.0", "1e3", "0x1", "9" * 40, "0"]
    )
    def test_an_id_is_ascii_digits_from_one_up_and_nothing_else(self, typed):
        form = given(f"provider={typed}")
        assert form.object_id("provider") is None
        assert form.errors == {"provider": ["That is not an id: choose from the list."]}

    def test_an_id_typed_in_ascii_digits_is_read(self):
        assert given("provider=42").object_id("provider") == 42
        assert given("provider=").object_id("provider") is None
        assert given("").object_id("provider") is None

    def test_an_id_past_a_bigint_is_refused(self):
        form = given(f"provider={10**18}")
        assert form.object_id("provider") is None and "provider" in form.errors

    def test_a_whole_number_outside_its_range_takes_the_default_and_says_why(self):
        form = given("days=0")
        assert form.whole_number("days", low=1, high=3650, default=30) == 30
        assert form.errors == {"days": ["Enter a whole number from 1 to 3650."]}

    def test_a_field_sent_twice_is_refused(self):
        form = given("reason=a&reason=b")
        assert form.text("reason", default="none") == "none"
        assert form.errors == {"reason": ["Send one value, not several."]}

    def test_a_nul_character_is_refused_in_text(self):
        form = given("q=a%00b")
        assert form.text("q") == "" and form.errors == {"q": [NUL_REFUSED]}

    def test_text_past_its_length_is_refused(self):
        form = given("q=" + "x" * 11)
        assert form.text("q", max_length=10) == "" and "q" in form.errors

    def test_a_choice_is_one_of_its_values(self):
        assert given("sort=hits").choice("sort", ("hits", "question"), default="question") == "hits"
        form = given("sort=%C2%B2")
        assert form.choice("sort", ("hits", "question"), default="question") == "question"
        assert form.errors == {"sort": ["Choose one of: hits, question."]}

    def test_nul_free_looks_inside_every_string_of_a_json_value(self):
        assert nul_free({"url": "https://example.com", "tags": ["a", 1, None]})
        assert not nul_free({"url": ["https://example.com", "a\x00"]})
        assert not nul_free({"key\x00": 1})

    def test_the_rows_of_an_action_are_ids(self):
        assert object_ids(["1", "22"]) == [1, 22]
        assert object_ids(["1", "²"]) is None
        assert object_ids([""]) is None


@pytest.fixture
def operator() -> ServingClient:
    gateway = Gateway(store=MemoryStore())
    status_permission()
    client = ServingClient(gateway)
    client.force_login(get_user_model().objects.create_superuser("boss", "boss@example.com"))
    with serving(gateway):
        yield client


@pytest.mark.django_db
class TestControlRoom:
    @pytest.mark.parametrize("typed", ["²", "٣", "9" * 30])
    def test_a_kill_switch_forcing_a_provider_not_named_by_its_id_is_refused(self, operator, typed):
        make_provider(name="p3")
        response = operator.post(
            reverse("admin:control-kill-switch"),
            {"mode": KillSwitch.FORCE_PROVIDER, "provider": typed, "reason": "drill"},
        )
        assert response.status_code == 422
        assert "That is not an id" in response.content.decode()
        assert policy_get().kill_switch == KillSwitch.OFF

    def test_an_answer_with_a_nul_character_is_refused_on_its_field(self, operator):
        answer = make_static_answer()
        response = operator.post(
            reverse("admin:control-static-edit", args=[answer.pk]),
            {"question": answer.question, "answer": "a\x00b", "enabled": "on"},
        )
        assert response.status_code == 422
        assert NUL_REFUSED in response.content.decode()
        assert StaticAnswer.objects.get(pk=answer.pk).answer == answer.answer

    def test_a_search_with_a_nul_character_is_a_bad_request(self, operator):
        response = operator.get(reverse("admin:control-static-list"), {"q": "\x00"})
        assert response.status_code == 400 and b"q:" in response.content

    def test_a_threshold_sent_twice_is_refused_and_nothing_is_saved(self, operator):
        response = operator.post(
            reverse("admin:control-thresholds-save"), {"consecutive_failures": ["4", "5"]}
        )
        assert response.status_code == 422
        assert "Send one value, not several. Nothing was saved." in response.content.decode()
        assert not ConfigChange.objects.filter(target_type="providers.failoverpolicy").exists()


@pytest.mark.django_db
class TestAdmin:
    def test_an_action_on_rows_not_named_by_their_ids_is_a_bad_request(self, operator):
        app = make_client_app()
        response = operator.post(
            reverse("admin:providers_clientapp_changelist"),
            {"action": "revoke_keys", "_selected_action": [str(app.pk), "²"], "index": "0"},
        )
        assert response.status_code == 400
        assert ClientApp.objects.get(pk=app.pk).revoked_at is None

    def test_a_list_filtered_on_a_nul_character_is_a_bad_request(self, operator):
        response = operator.get(reverse("admin:billing_callrecord_changelist"), {"q": "\x00"})
        assert response.status_code == 400

    def test_a_blank_to_field_opens_the_change_page(self, operator):
        answer = make_static_answer()
        url = reverse("admin:providers_staticanswer_change", args=[answer.pk])
        assert operator.get(url, {"_to_field": ""}).status_code == 200

    def test_a_json_value_holding_a_nul_character_is_refused_on_its_field(self):
        form_class = modelform_factory(
            AlertChannel, form=StrictModelForm, fields=("name", "kind", "config", "min_severity")
        )
        form = form_class(
            {
                "name": "hook",
                "kind": "webhook",
                "config": '{"url": "https://example.com/\\u0000"}',
                "min_severity": "info",
            }
        )
        assert not form.is_valid()
        assert NUL_REFUSED in form.errors["config"]
