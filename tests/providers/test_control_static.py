"""The static-answer workbench: the list, inline edits (recorded, served by the API at once),
the try-a-question box, coverage and the unmatched questions."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from providers.models import ConfigChange, StaticAnswer
from providers.selectors import policy_get
from providers.services.seeding import static_answers_load_defaults
from tests.factories import make_call_record, make_static_answer, make_user
from tests.providers.conftest import ask

pytestmark = pytest.mark.django_db

VIEW = "providers.view_staticanswer"
CHANGE = "providers.change_staticanswer"
HTMX = {"HTTP_HX_REQUEST": "true"}
OFFICE_HOURS = "What are your office hours?"


def edit_url(answer: StaticAnswer) -> str:
    return reverse("admin:control-static-edit", args=[answer.pk])


def row_ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'id="static-answer-(\d+)"', response.content.decode())]


def edit_data(row: StaticAnswer, /, **changes) -> dict[str, str]:
    """The edit form as a browser posts it (an unticked box is left out)."""
    data = {
        "question": row.question,
        "alternative_phrasings": row.alternative_phrasings,
        "answer": row.answer,
        "enabled": "on" if row.enabled else "",
    }
    data.update(changes)
    return {key: value for key, value in data.items() if value != ""}


def logged_in(*perms: str) -> tuple[Client, object]:
    user = make_user(perms=perms)
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def editor():
    return logged_in(VIEW, CHANGE)


@pytest.fixture
def editor_client(editor) -> Client:
    return editor[0]


@pytest.fixture
def viewer_client() -> Client:
    return logged_in(VIEW)[0]


@pytest.fixture
def refunds() -> StaticAnswer:
    return make_static_answer(
        question="Can I get a refund?",
        alternative_phrasings="refund policy\nmoney back",
        answer="Yes: within 30 days, no questions asked.",
    )


@pytest.fixture
def shipping() -> StaticAnswer:
    return make_static_answer(
        question="Do you ship abroad?",
        alternative_phrasings="international delivery",
        answer="We deliver to 40 countries.",
    )


# The list ----------------------------------------------------------------------------------


def test_the_workbench_lists_the_answers_with_hits_and_last_hit(editor_client, refunds, shipping):
    StaticAnswer.objects.filter(pk=refunds.pk).update(
        hit_count=17, last_hit_at=timezone.now() - timedelta(hours=2)
    )
    response = editor_client.get(reverse("admin:control-static"))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Can I get a refund?" in page and "Do you ship abroad?" in page
    assert '<td class="static-hits">17</td>' in page
    assert "2\xa0hours ago" in page
    assert "never" in page  # shipping has no hit yet
    assert 'hx-trigger="input changed delay:300ms, search"' in page
    assert reverse("admin:control-static") in page  # the nav links to the workbench


def test_it_sorts_by_hits_most_first(editor_client, refunds, shipping):
    quiet = make_static_answer(question="Anything quiet?")
    StaticAnswer.objects.filter(pk=shipping.pk).update(hit_count=9)
    StaticAnswer.objects.filter(pk=refunds.pk).update(hit_count=3)
    url = reverse("admin:control-static-list")
    assert row_ids(editor_client.get(url, {"sort": "hits"}, **HTMX)) == [
        shipping.pk,
        refunds.pk,
        quiet.pk,
    ]
    by_question = editor_client.get(url, **HTMX)
    assert row_ids(by_question) == [quiet.pk, refunds.pk, shipping.pk]


def test_search_filters_on_question_phrasings_and_answer(editor_client, refunds, shipping):
    url = reverse("admin:control-static-list")
    assert row_ids(editor_client.get(url, {"q": "ABROAD"}, **HTMX)) == [shipping.pk]
    assert row_ids(editor_client.get(url, {"q": "international"}, **HTMX)) == [shipping.pk]
    assert row_ids(editor_client.get(url, {"q": "30 days"}, **HTMX)) == [refunds.pk]
    nothing = editor_client.get(url, {"q": "teleport"}, **HTMX)
    assert row_ids(nothing) == [] and "No answer matches “teleport”" in nothing.content.decode()


def test_the_list_partial_is_only_the_list(editor_client, refunds):
    response = editor_client.get(reverse("admin:control-static-list"), **HTMX)
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="static-list"')
    assert "<html" not in page


# Editing -----------------------------------------------------------------------------------


def test_edit_swaps_the_row_for_a_form_with_the_phrasings_one_per_line(editor_client, refunds):
    response = editor_client.get(edit_url(refunds), **HTMX)
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith(f'<tr id="static-answer-{refunds.pk}"')
    assert f'hx-post="{edit_url(refunds)}"' in page
    assert ">refund policy\nmoney back</textarea>" in page
    assert 'name="enabled" checked' in page
    assert "csrfmiddlewaretoken" in page


def test_cancel_restores_the_read_only_row(editor_client, refunds):
    response = editor_client.get(reverse("admin:control-static-row", args=[refunds.pk]), **HTMX)
    page = response.content.decode()
    assert page.lstrip().startswith(f'<tr id="static-answer-{refunds.pk}"')
    assert "<form" not in page and "Can I get a refund?" in page


def test_saving_records_the_change_with_before_and_after(editor, refunds):
    client, user = editor
    response = client.post(
        edit_url(refunds),
        edit_data(
            refunds,
            answer="Yes: within 60 days.",
            alternative_phrasings="  refund policy \n\n money back\n give me my money  ",
        ),
        **HTMX,
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "<form" not in page and "Yes: within 60 days." in page and "Saved" in page
    assert "static-answer-saved" in response.headers["HX-Trigger"]
    refunds.refresh_from_db()
    assert refunds.answer == "Yes: within 60 days."
    assert refunds.alternative_phrasings == "refund policy\nmoney back\ngive me my money"
    assert refunds.updated_by == user
    [change] = ConfigChange.objects.filter(target_type="providers.staticanswer")
    assert (change.action, change.actor, change.target_id) == ("update", user, str(refunds.pk))
    assert change.before == {
        "answer": "Yes: within 30 days, no questions asked.",
        "alternative_phrasings": "refund policy\nmoney back",
    }
    assert change.after == {
        "answer": "Yes: within 60 days.",
        "alternative_phrasings": "refund policy\nmoney back\ngive me my money",
    }


def test_unticking_enabled_disables_the_answer(editor_client, refunds):
    response = editor_client.post(edit_url(refunds), edit_data(refunds, enabled=""), **HTMX)
    assert response.status_code == 200
    refunds.refresh_from_db()
    assert refunds.enabled is False
    change = ConfigChange.objects.get(target_type="providers.staticanswer")
    assert (change.before, change.after) == ({"enabled": True}, {"enabled": False})


def test_a_save_that_changes_nothing_records_nothing(editor_client, refunds):
    response = editor_client.post(edit_url(refunds), edit_data(refunds), **HTMX)
    assert response.status_code == 200
    assert not ConfigChange.objects.exists()


def test_a_blank_answer_is_refused_with_422_inline_and_nothing_is_saved(editor_client, refunds):
    response = editor_client.post(
        edit_url(refunds), edit_data(refunds, question="Refunds?", answer="   "), **HTMX
    )
    page = response.content.decode()
    assert response.status_code == 422
    assert 'class="errornote"' in page and "The answer cannot be blank." in page
    assert 'value="Refunds?"' in page  # the operator's input comes back to be fixed
    refunds.refresh_from_db()
    assert refunds.question == "Can I get a refund?"
    assert refunds.answer == "Yes: within 30 days, no questions asked."
    assert not ConfigChange.objects.exists()


def test_a_question_another_answer_has_is_refused(editor_client, refunds, shipping):
    response = editor_client.post(
        edit_url(refunds), edit_data(refunds, question=shipping.question), **HTMX
    )
    assert response.status_code == 422
    assert "already exists" in response.content.decode()
    assert not ConfigChange.objects.exists()


def test_without_the_change_permission_saving_is_forbidden(viewer_client, refunds):
    page = viewer_client.get(reverse("admin:control-static")).content.decode()
    assert "Can I get a refund?" in page and edit_url(refunds) not in page
    assert viewer_client.get(edit_url(refunds), **HTMX).status_code == 403
    response = viewer_client.post(edit_url(refunds), edit_data(refunds, answer="No."), **HTMX)
    assert response.status_code == 403
    refunds.refresh_from_db()
    assert refunds.answer == "Yes: within 30 days, no questions asked."
    assert not ConfigChange.objects.exists()


def test_staff_without_the_view_permission_are_refused(refunds):
    client, _ = logged_in()
    for name, args in (
        ("control-static", []),
        ("control-static-list", []),
        ("control-static-try", []),
        ("control-static-row", [refunds.pk]),
    ):
        assert client.get(reverse(f"admin:{name}", args=args)).status_code == 403, name


def test_anonymous_users_are_sent_to_log_in(client):
    response = client.get(reverse("admin:control-static"))
    assert response.status_code == 302 and reverse("admin:login") in response["Location"]


def test_a_post_without_the_csrf_token_is_refused(editor, refunds):
    _, user = editor
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    data = edit_data(refunds, answer="Changed without a token.")
    assert client.post(edit_url(refunds), data, **HTMX).status_code == 403
    refunds.refresh_from_db()
    assert refunds.answer == "Yes: within 30 days, no questions asked."
    # With the token in the header, as control.js sends it, the same post goes through.
    client.get(reverse("admin:control-static"))
    token = client.cookies["csrftoken"].value
    response = client.post(edit_url(refunds), data, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert response.status_code == 200


# Try a question ----------------------------------------------------------------------------


@pytest.fixture
def shipped_answers() -> None:
    static_answers_load_defaults()


def try_question(client: Client, question: str) -> str:
    response = client.get(reverse("admin:control-static-try"), {"ask": question}, **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_try_shows_the_matching_answer_and_its_score(viewer_client, shipped_answers):
    page = try_question(viewer_client, "opening hourz")
    assert page.lstrip().startswith('<div id="static-try-result"')
    assert OFFICE_HOURS in page
    assert '<strong class="static-score">92.3</strong> (threshold 85)' in page
    assert "closest to “opening hours”" in page
    assert "degradation message would be sent" not in page


def test_try_an_exact_phrasing_scores_100(viewer_client, shipped_answers):
    page = try_question(viewer_client, "When are you open?")
    assert '<strong class="static-score">100.0</strong>' in page and "an exact match" in page


def test_try_nonsense_gets_the_degradation_message_and_the_best_candidate(
    viewer_client, shipped_answers
):
    policy = policy_get()
    policy.degradation_message = "We're down for a moment."
    policy.save()
    page = try_question(viewer_client, "purple elephants dancing on the moon")
    assert "degradation message would be sent" in page
    assert "We&#x27;re down for a moment." in page
    assert "Best candidate under the threshold" in page
    assert '<strong class="static-score">48.1</strong>' in page


def test_try_follows_the_policy_threshold(viewer_client, shipped_answers):
    policy = policy_get()
    policy.static_match_threshold = 95
    policy.save()
    page = try_question(viewer_client, "opening hourz")
    assert "degradation message would be sent" in page and "(95)" in page
    assert '<strong class="static-score">92.3</strong>' in page


def test_try_sees_an_edit_at_once(editor_client, shipped_answers):
    answer = StaticAnswer.objects.get(question=OFFICE_HOURS)
    new_text = "Every day, 08:00–20:00."
    editor_client.post(edit_url(answer), edit_data(answer, answer=new_text), **HTMX)
    assert new_text in try_question(editor_client, "when are you open")


def test_the_page_shows_a_trial_without_javascript(viewer_client, shipped_answers):
    response = viewer_client.get(reverse("admin:control-static"), {"ask": "opening hourz"})
    assert '<strong class="static-score">92.3</strong>' in response.content.decode()


# What the ledger says ----------------------------------------------------------------------


def days_ago(days: float):
    return timezone.now() - timedelta(days=days)


def test_coverage_is_the_share_of_static_tier_requests_that_found_an_answer(viewer_client):
    for _ in range(3):
        make_call_record(tier="static", outcome="fallback", final_provider="")
    make_call_record(tier="degraded", outcome="fallback", final_provider="")
    make_call_record(tier="degraded", outcome="fallback", created_at=days_ago(8))
    make_call_record(tier="primary")
    response = viewer_client.get(reverse("admin:control-static"))
    coverage = response.context["coverage"]
    assert (coverage.answered, coverage.unanswered, coverage.share_pct) == (3, 1, 75.0)
    page = response.content.decode()
    assert '<strong class="static-share" id="static-coverage-share">75.0 %</strong>' in page
    assert '<span id="static-coverage-answered">3</span>' in page
    assert '<span id="static-coverage-unanswered">1</span>' in page


def test_coverage_says_so_when_nothing_reached_the_static_tier(viewer_client):
    make_call_record(tier="primary")
    page = viewer_client.get(reverse("admin:control-static")).content.decode()
    assert 'id="static-coverage-none"' in page


def test_the_most_frequent_unmatched_questions_are_listed_with_counts(viewer_client):
    policy = policy_get()
    policy.store_prompts = True
    policy.save()
    for _ in range(3):
        make_call_record(tier="degraded", outcome="fallback", prompt="can I pay in bitcoin")
    for _ in range(2):
        make_call_record(tier="degraded", outcome="fallback", prompt="do you have a mascot")
    for n in range(10):
        make_call_record(tier="degraded", outcome="fallback", prompt=f"odd question {n:02}")
    make_call_record(tier="degraded", prompt="an old question", created_at=days_ago(8))
    make_call_record(tier="degraded", prompt="an old question", created_at=days_ago(8))
    make_call_record(tier="static", prompt="when are you open")
    make_call_record(tier="degraded", prompt="")  # stored while prompts were off
    response = viewer_client.get(reverse("admin:control-static"))
    unmatched = response.context["unmatched"]
    assert len(unmatched) == 10
    assert unmatched[:3] == [
        {"prompt": "can I pay in bitcoin", "count": 3},
        {"prompt": "do you have a mascot", "count": 2},
        {"prompt": "odd question 00", "count": 1},
    ]
    page = response.content.decode()
    assert (
        '<td class="static-prompt">can I pay in bitcoin</td><td class="static-times">3</td>' in page
    )
    assert "an old question" not in page and 'id="static-prompts-not-stored"' not in page


def test_unmatched_questions_are_hidden_when_prompts_are_not_stored(viewer_client):
    make_call_record(tier="degraded", outcome="fallback", prompt="can I pay in bitcoin")
    response = viewer_client.get(reverse("admin:control-static"))
    page = response.content.decode()
    assert response.context["unmatched"] is None
    assert "can I pay in bitcoin" not in page
    assert "Prompts aren't stored" in page
    policy_url = reverse("admin:providers_failoverpolicy_change", args=[policy_get().pk])
    assert f'href="{policy_url}"' in page


# The edit reaches the router ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_saved_edit_is_what_the_api_serves(api, gateway, primary, secondary):
    primary.set_fault(mode="error")
    secondary.set_fault(mode="error", status=503)
    before = (await ask(api, "When are you open?")).json()
    assert before["tier"] == "static" and "09:00" in before["text"]
    version = await gateway.store.config_version()

    def save():
        client, user = logged_in(VIEW, CHANGE)
        answer = StaticAnswer.objects.get(question=OFFICE_HOURS)
        new_text = "We're open every day, 08:00–20:00 Lisbon time."
        response = client.post(edit_url(answer), edit_data(answer, answer=new_text), **HTMX)
        return response, user, answer

    response, user, answer = await sync_to_async(save)()
    assert response.status_code == 200
    # The recorded change moved the config version: every serving process rebuilds within 1 s.
    assert await gateway.store.config_version() > version
    await gateway.snapshots.refresh()
    after = (await ask(api, "When are you open?")).json()
    assert after["tier"] == "static"
    assert after["text"] == "We're open every day, 08:00–20:00 Lisbon time."
    change = await sync_to_async(ConfigChange.objects.get)(
        target_type="providers.staticanswer", target_id=str(answer.pk)
    )
    assert change.action == "update" and change.actor_id == user.pk
    assert change.before == {"answer": answer.answer}
    assert change.after == {"answer": "We're open every day, 08:00–20:00 Lisbon time."}
