"""Small builders for the tests: valid by default, any field overridable."""

from __future__ import annotations

import itertools
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from billing.models import Budget, CallRecord
from gateway.engine.clients import key_digest
from providers.models import ClientApp, FailoverPolicy, Provider, StaticAnswer
from providers.selectors import policy_get

_sequence = itertools.count(1)

# The suite's own client key: the app made by `make_client_app()` answers to it.
TEST_CLIENT_KEY = "fgw_the-suites-own-client-key-0000000000000000"
AUTH = {"Authorization": f"Bearer {TEST_CLIENT_KEY}"}


def make_client_app(key: str = TEST_CLIENT_KEY, **overrides: Any) -> ClientApp:
    """A client app answering to `key`: no limits and every permission, unless overridden."""
    values: dict[str, Any] = {
        "name": f"client-{next(_sequence)}",
        "requests_per_minute": 0,
        "tokens_per_minute": 0,
        "allowed_models": "*",
        "allow_high_priority": True,
        "can_read_status": True,
    }
    values.update(overrides)
    app = ClientApp(key_prefix=key[:12], key_digest=key_digest(key), **values)
    app.full_clean()
    app.save()
    return app


def make_provider(**overrides: Any) -> Provider:
    n = next(_sequence)
    values: dict[str, Any] = {
        "name": f"provider-{n}",
        "kind": "ollama",
        "base_url": "http://127.0.0.1:11434",
        "model": "llama3.1:8b",
        "priority": 10 * n,
        "is_local": True,
    }
    values.update(overrides)
    provider = Provider(**values)
    provider.full_clean()
    provider.save()
    return provider


def make_static_answer(**overrides: Any) -> StaticAnswer:
    n = next(_sequence)
    values: dict[str, Any] = {
        "question": f"What is question number {n}?",
        "alternative_phrasings": f"question {n}\nnumber {n} please",
        "answer": f"This is answer {n}.",
    }
    values.update(overrides)
    answer = StaticAnswer(**values)
    answer.full_clean()
    answer.save()
    return answer


def make_budget(**overrides: Any) -> Budget:
    values: dict[str, Any] = {"scope": "all", "period": "day", "cap": Decimal("10")}
    values.update(overrides)
    budget = Budget(**values)
    budget.full_clean()
    budget.save()
    return budget


def make_call_record(**overrides: Any) -> CallRecord:
    values: dict[str, Any] = {
        "final_provider": "provider-x",
        "tier": "primary",
        "outcome": "ok",
        "status": 200,
        "latency_ms": 420,
        "attempts": [{"provider": "provider-x", "outcome": "ok", "latency_ms": 410}],
    }
    values.update(overrides)
    return CallRecord.objects.create(**values)


def make_user(*, username: str | None = None, staff: bool = True, perms: tuple[str, ...] = ()):
    user = get_user_model().objects.create_user(
        username=username or f"user-{next(_sequence)}",
        password="a-long-test-password",
        is_staff=staff,
    )
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def policy_set(**values: Any) -> None:
    """Change the stored policy behind the services' back (another operator, a shell)."""
    policy_get()
    FailoverPolicy.objects.filter(pk=FailoverPolicy.SINGLETON_ID).update(**values)
