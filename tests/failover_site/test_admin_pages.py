"""Every model's admin list and change page renders for staff and is refused to anyone else."""

from __future__ import annotations

import pytest
from django.urls import reverse

from providers.models import ConfigChange
from providers.selectors import policy_get
from providers.services.audit import config_change_record, instance_snapshot
from tests.factories import (
    make_budget,
    make_call_record,
    make_provider,
    make_static_answer,
    make_user,
)

pytestmark = pytest.mark.django_db


def _provider():
    return make_provider()


def _policy():
    return policy_get()


def _static_answer():
    return make_static_answer()


def _budget():
    return make_budget()


def _call_record():
    return make_call_record()


def _config_change():
    provider = make_provider()
    return config_change_record(
        target=provider, action="create", before=None, after=instance_snapshot(provider)
    )


MODELS = [
    ("providers", "provider", _provider),
    ("providers", "failoverpolicy", _policy),
    ("providers", "staticanswer", _static_answer),
    ("providers", "configchange", _config_change),
    ("billing", "budget", _budget),
    ("billing", "callrecord", _call_record),
]
IDS = [name for _, name, _ in MODELS]


@pytest.fixture
def staff_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize(("app", "model", "build"), MODELS, ids=IDS)
def test_staff_see_the_list_and_change_pages(staff_client, app, model, build):
    obj = build()
    listing = staff_client.get(reverse(f"admin:{app}_{model}_changelist"), follow=True)
    assert listing.status_code == 200
    change = staff_client.get(reverse(f"admin:{app}_{model}_change", args=[obj.pk]))
    assert change.status_code == 200
    assert str(obj) in change.content.decode()


@pytest.mark.parametrize(("app", "model", "build"), MODELS, ids=IDS)
def test_anonymous_users_are_sent_to_log_in(client, app, model, build):
    obj = build()
    for url in (
        reverse(f"admin:{app}_{model}_changelist"),
        reverse(f"admin:{app}_{model}_change", args=[obj.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize(("app", "model", "build"), MODELS, ids=IDS)
def test_staff_without_permission_are_refused(client, app, model, build):
    obj = build()
    client.force_login(make_user(staff=True))
    assert client.get(reverse(f"admin:{app}_{model}_changelist")).status_code == 403
    assert client.get(reverse(f"admin:{app}_{model}_change", args=[obj.pk])).status_code == 403


def test_the_index_lists_every_model(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    for label in (
        "Providers",
        "Failover policy",
        "Static answers",
        "Config changes",
        "Budgets",
        "Call records",
    ):
        assert label in page


def test_the_ledger_is_searchable_by_request_id_and_by_words(staff_client):
    record = make_call_record(reason="primary_breaker_open")
    url = reverse("admin:billing_callrecord_changelist")
    by_id = staff_client.get(url, {"q": str(record.request_id)})
    assert by_id.status_code == 200 and str(record.request_id) in by_id.content.decode()
    assert staff_client.get(url, {"q": "breaker"}).status_code == 200


def test_the_audit_tables_are_read_only(staff_client):
    record = make_call_record()
    change = _config_change()
    for app, model, obj in (
        ("billing", "callrecord", record),
        ("providers", "configchange", change),
    ):
        assert staff_client.get(reverse(f"admin:{app}_{model}_add")).status_code == 403
        assert (
            staff_client.get(reverse(f"admin:{app}_{model}_delete", args=[obj.pk])).status_code
            == 403
        )
        page = staff_client.get(
            reverse(f"admin:{app}_{model}_change", args=[obj.pk])
        ).content.decode()
        assert 'name="_save"' not in page
    assert ConfigChange.objects.count() == 1
