from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import ProtectedError

from providers.models import FailoverPolicy, KillSwitch, Provider, StaticAnswer
from providers.selectors import policy_get
from tests.factories import make_provider, make_static_answer

pytestmark = pytest.mark.django_db


def _errors(instance) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        instance.full_clean()
    return caught.value.message_dict


class TestFailoverPolicy:
    def test_its_defaults_are_the_designs_thresholds(self):
        policy = policy_get()
        assert (policy.consecutive_failures, policy.failure_rate_pct) == (3, 30)
        assert (policy.failure_window_s, policy.failure_min_calls) == (60, 5)
        assert (policy.slow_call_s, policy.slow_call_rate_pct) == (8.0, 50)
        assert (policy.p95_latency_s, policy.p95_window_s) == (5.0, 120)
        assert (policy.cooldown_s, policy.cooldown_multiplier, policy.max_cooldown_s) == (
            60,
            2.0,
            600,
        )
        assert policy.half_open_probes == 3
        assert (policy.sentinel_interval_s, policy.sentinel_window) == (30, 5)
        assert (policy.sentinel_degraded_after, policy.sentinel_down_after_s) == (3, 300)
        assert policy.request_deadline_s == 30.0
        assert (policy.alert_cooldown_s, policy.flap_window_s) == (600, 60)
        assert policy.cloud_share_target_pct == 5.0
        assert policy.store_prompts is False
        assert policy.kill_switch == KillSwitch.OFF
        assert policy.degradation_message.strip()
        policy.full_clean()

    def test_there_is_only_ever_one_row(self):
        first = policy_get()
        second = policy_get()
        assert first.pk == second.pk == FailoverPolicy.SINGLETON_ID
        assert FailoverPolicy.objects.count() == 1

    def test_the_database_refuses_a_second_row(self):
        policy_get()
        with pytest.raises(IntegrityError):
            FailoverPolicy.objects.create(id=2)

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("consecutive_failures", 0, "at least 1"),
            ("failure_window_s", 0, "at least 1"),
            ("failure_min_calls", 0, "at least 1"),
            ("p95_window_s", 0, "at least 1"),
            ("sentinel_window", 0, "at least 1"),
            ("sentinel_interval_s", 0, "at least 1"),
            ("half_open_probes", 0, "at least 1"),
            ("cooldown_s", 0, "at least 1"),
            ("alert_cooldown_s", 0, "at least 1"),
            ("flap_window_s", 0, "at least 1"),
            ("cache_ttl_s", 0, "at least 1"),
            ("failure_rate_pct", 101, "between 0 and 100"),
            ("slow_call_rate_pct", 150, "between 0 and 100"),
            ("cloud_share_target_pct", -1, "between 0 and 100"),
            ("cloud_share_target_pct", 100.5, "between 0 and 100"),
            ("static_match_threshold", 101, "between 0 and 100"),
            ("slow_call_s", 0, "at least 0.1"),
            ("p95_latency_s", 0, "at least 0.1"),
            ("request_deadline_s", 0, "at least 0.1"),
            ("cooldown_multiplier", 0.5, "at least 1"),
            ("sentinel_check_timeout_s", 61, "at most 60"),
        ],
    )
    def test_it_rejects_an_invalid_threshold_with_a_clear_message(self, field, value, message):
        policy = policy_get()
        setattr(policy, field, value)
        errors = _errors(policy)
        assert list(errors) == [field]
        assert message in errors[field][0]

    def test_it_rejects_a_maximum_cooldown_below_the_base(self):
        policy = policy_get()
        policy.cooldown_s, policy.max_cooldown_s = 120, 60
        errors = _errors(policy)
        assert "cannot be below the base cooldown" in errors["max_cooldown_s"][0]

    def test_it_rejects_more_bad_checks_than_the_window_holds(self):
        policy = policy_get()
        policy.sentinel_window, policy.sentinel_degraded_after = 3, 4
        assert "cannot exceed the sentinel window" in _errors(policy)["sentinel_degraded_after"][0]

    def test_a_set_kill_switch_needs_a_reason(self):
        policy = policy_get()
        policy.kill_switch = KillSwitch.STATIC_ONLY
        assert "Say why" in _errors(policy)["kill_switch_reason"][0]
        policy.kill_switch_reason = "primary GPU node replaced"
        policy.full_clean()

    def test_forcing_a_provider_needs_the_provider(self):
        policy = policy_get()
        policy.kill_switch, policy.kill_switch_reason = KillSwitch.FORCE_PROVIDER, "drill"
        assert "Choose the provider" in _errors(policy)["kill_switch_provider"][0]
        policy.kill_switch_provider = make_provider()
        policy.full_clean()

    def test_only_a_forcing_switch_names_a_provider(self):
        policy = policy_get()
        policy.kill_switch_provider = make_provider()
        assert "Only a switch that forces" in _errors(policy)["kill_switch_provider"][0]

    def test_a_forced_provider_cannot_be_deleted(self):
        provider = make_provider()
        policy = policy_get()
        policy.kill_switch, policy.kill_switch_reason = KillSwitch.FORCE_PROVIDER, "drill"
        policy.kill_switch_provider = provider
        policy.save()
        with pytest.raises(ProtectedError):
            provider.delete()

    def test_the_degradation_message_cannot_be_blank(self):
        policy = policy_get()
        policy.degradation_message = "   "
        assert "cannot be empty" in _errors(policy)["degradation_message"][0]


class TestProvider:
    def test_a_valid_provider_saves_and_reads_well(self):
        provider = make_provider(name="ollama-gpu", model="llama3.1:8b")
        assert str(provider) == "ollama-gpu (Ollama, llama3.1:8b)"

    @pytest.mark.parametrize(
        "url", ["ftp://models.example.com", "file:///etc/passwd", "127.0.0.1:11434", "not a url"]
    )
    def test_the_base_url_must_be_http_or_https(self, url):
        errors = _errors(Provider(name="p", kind="ollama", base_url=url, model="m"))
        assert "base_url" in errors

    @pytest.mark.parametrize("url", ["http://127.0.0.1:11434", "https://api.openai.com/v1"])
    def test_it_accepts_http_and_https_urls(self, url):
        Provider(name="p", kind="openai", base_url=url, model="m").full_clean()

    def test_the_key_field_takes_a_variable_name_not_a_key(self):
        provider = Provider(
            name="p",
            kind="openai",
            base_url="https://x.example",
            model="m",
            api_key_env="sk-abc123",
        )
        assert "environment variable" in _errors(provider)["api_key_env"][0]

    def test_it_tells_whether_the_key_variable_is_set_without_storing_it(self, monkeypatch):
        provider = make_provider(kind="openai", api_key_env="FAILOVER_SECRET_TEST_KEY")
        monkeypatch.delenv("FAILOVER_SECRET_TEST_KEY", raising=False)
        assert provider.api_key_configured is False
        monkeypatch.setenv("FAILOVER_SECRET_TEST_KEY", "sk-secret-value")
        assert provider.api_key_configured is True
        stored = Provider.objects.filter(pk=provider.pk).values()[0]
        assert "sk-secret-value" not in str(stored)

    def test_names_are_unique_slugs(self):
        make_provider(name="primary")
        errors = _errors(Provider(name="primary", kind="ollama", base_url="http://a.b", model="m"))
        assert "name" in errors
        assert "name" in _errors(
            Provider(name="has space", kind="ollama", base_url="http://a.b", model="m")
        )

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("timeout_s", 0),
            ("timeout_s", 601),
            ("context_window", 10),
            ("price_input_per_1m", -1),
            ("price_output_per_1m", -0.01),
            ("kind", "bedrock"),
        ],
    )
    def test_it_rejects_out_of_range_values(self, field, value):
        provider = Provider(name="p", kind="ollama", base_url="http://a.b", model="m")
        setattr(provider, field, value)
        assert field in _errors(provider)


class TestStaticAnswer:
    def test_phrasings_are_the_question_then_each_alternative(self):
        answer = make_static_answer(
            question="What are your hours?",
            alternative_phrasings="opening hours\n\n  when are you open  \n",
        )
        assert answer.phrasings == ["What are your hours?", "opening hours", "when are you open"]
        assert str(answer) == "What are your hours?"

    def test_blank_question_or_answer_is_rejected(self):
        errors = _errors(StaticAnswer(question="   ", answer=" "))
        assert set(errors) >= {"question", "answer"}

    def test_an_answer_over_4000_characters_is_rejected_on_every_write(self):
        answer = StaticAnswer(question="Q?", answer="a" * 4001)
        assert "at most 4000" in _errors(answer)["answer"][0]

    def test_a_phrasing_listed_twice_is_rejected(self):
        answer = StaticAnswer(question="Q?", answer="A.", alternative_phrasings="Hours\nhours")
        assert "listed twice" in _errors(answer)["alternative_phrasings"][0]

    def test_questions_are_unique(self):
        make_static_answer(question="Do you offer refunds?")
        assert "question" in _errors(StaticAnswer(question="Do you offer refunds?", answer="Yes."))
