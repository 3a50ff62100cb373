"""Repeated failed admin log-ins are refused for a while, through the admin's own log-in form:
five failures for one user name, or from one client address, within the window."""

from __future__ import annotations

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password-1"
LOGIN = "/admin/login/?next=/admin/"
THROTTLED = "Too many failed log-ins"


@pytest.fixture(autouse=True)
def _fresh_counters(settings):
    # A fast hasher: these tests try dozens of passwords.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def operator():
    return get_user_model().objects.create_user(
        "ops", "ops@example.com", PASSWORD, is_staff=True, is_superuser=True
    )


def _log_in(username: str, password: str, address: str = "198.51.100.7") -> tuple[Client, str]:
    """A fresh browser posting the log-in form; its page's text, or "" when it got in."""
    browser = Client(REMOTE_ADDR=address)
    response = browser.post(LOGIN, {"username": username, "password": password})
    if response.status_code == 302:
        assert response.headers["location"] == "/admin/"
        return browser, ""
    assert response.status_code == 200
    return browser, response.content.decode()


def test_five_failures_lock_the_account_even_against_the_right_password(operator):
    for _ in range(5):
        assert "Please enter the correct username and password" in _log_in("ops", "wrong")[1]
    browser, page = _log_in("ops", PASSWORD)
    assert THROTTLED in page and "Try again in 15 minutes." in page
    assert browser.get("/admin/").status_code == 302  # not logged in: back to the log-in page


def test_the_account_lock_holds_from_every_address_and_for_any_spelling(operator):
    for n in range(5):
        _log_in("ops", "wrong", address=f"198.51.100.{n + 10}")
    assert THROTTLED in _log_in("OPS ", "wrong", address="203.0.113.50")[1]
    assert THROTTLED in _log_in("ops", PASSWORD, address="203.0.113.50")[1]


def test_five_failures_from_one_address_lock_that_address_for_every_account(operator):
    for n in range(5):
        _log_in(f"guess-{n}", "wrong", address="192.0.2.99")
    assert THROTTLED in _log_in("ops", PASSWORD, address="192.0.2.99")[1]
    # The account itself is not locked: from another address the operator gets in.
    assert _log_in("ops", PASSWORD, address="192.0.2.100")[1] == ""


def test_a_successful_log_in_clears_its_user_names_count(operator):
    for n in range(4):
        _log_in("ops", "wrong", address=f"198.51.100.{n + 20}")
    assert _log_in("ops", PASSWORD, address="198.51.100.30")[1] == ""
    for n in range(4):
        _log_in("ops", "wrong", address=f"198.51.100.{n + 40}")
    assert _log_in("ops", PASSWORD, address="198.51.100.50")[1] == ""


def test_under_the_limit_nothing_is_locked(operator):
    for _ in range(4):
        _log_in("ops", "wrong")
    assert _log_in("ops", PASSWORD)[1] == ""


def test_the_limit_and_the_window_come_from_the_settings(operator, settings):
    settings.ADMIN_LOGIN_MAX_FAILURES = 2
    settings.ADMIN_LOGIN_WINDOW_S = 120
    for _ in range(2):
        _log_in("ops", "wrong")
    page = _log_in("ops", PASSWORD)[1]
    assert THROTTLED in page and "Try again in 2 minutes." in page


@pytest.mark.services
def test_the_counts_are_kept_in_redis_for_every_serving_process(operator, settings):
    for _ in range(5):
        _log_in("ops", "wrong", address="192.0.2.7")
    shared = redis.Redis.from_url(settings.REDIS_URL)
    locks = list(shared.scan_iter("*admin-login*locked-until"))
    assert len(locks) == 2  # the user name's and the address's
    assert all(0 < shared.ttl(key) <= settings.ADMIN_LOGIN_WINDOW_S for key in locks)


def test_guesses_sent_all_at_once_get_no_more_password_checks_than_the_limit(operator):
    # Each attempt is counted before its password is checked: a burst of guesses, all past the
    # lock check before any has failed, still gets only the limit's worth of checks.
    from failover_site.admin_login import login_attempt_take

    taken = [login_attempt_take(username="ops", address="198.51.100.9") for _ in range(12)]
    assert taken == [True] * 5 + [False] * 7
    assert _log_in("ops", PASSWORD, address="203.0.113.1")[1].count("Too many failed") == 1
