"""Repeated failed admin log-ins are refused for a while, through the admin's own log-in form:
five failures for one user name from one client address, or from one address for any names,
within the window. The guesser's address is locked, never the operators' user name."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test import Client

from alerts.models import AlertEvent
from devtools.fake_receiver import FakeReceiver
from failover_site.admin_login import login_attempt_take, login_lock_remaining_s
from runtime.scheduler import one_off_jobs_settle
from tests.alerts.builders import webhook_channel

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password-1"
LOGIN = "/admin/login/?next=/admin/"
THROTTLED = "Too many failed log-ins"
WRONG = "Please enter the correct username and password"
ATTACKER = "192.0.2.66"
OPERATOR = "198.51.100.200"


@pytest.fixture(autouse=True)
def _fresh_counters():
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


def _login_alerts() -> list[AlertEvent]:
    return list(AlertEvent.objects.filter(kind="admin_login").order_by("pk"))


def test_fifty_wrong_passwords_from_one_address_leave_the_right_one_working_from_another(operator):
    pages = [_log_in("ops", f"guess-{n}", address=ATTACKER)[1] for n in range(50)]
    assert all(WRONG in page for page in pages[:5])
    assert all(THROTTLED in page for page in pages[5:])
    # The operator, from their own address, gets in; the guesser's address stays refused, even
    # with the right password.
    assert _log_in("ops", PASSWORD, address=OPERATOR)[1] == ""
    assert THROTTLED in _log_in("ops", PASSWORD, address=ATTACKER)[1]


def test_five_failures_lock_the_name_from_that_address_even_against_the_right_password(operator):
    for _ in range(5):
        assert WRONG in _log_in("ops", "wrong")[1]
    browser, page = _log_in("ops", PASSWORD)
    assert THROTTLED in page and "Try again in 15 minutes." in page
    assert browser.get("/admin/").status_code == 302  # not logged in: back to the log-in page


def test_the_lock_holds_for_any_spelling_of_the_name(operator):
    for _ in range(5):
        _log_in("ops", "wrong", address=ATTACKER)
    assert THROTTLED in _log_in("OPS ", "wrong", address=ATTACKER)[1]


def test_five_failures_from_one_address_lock_that_address_for_every_account(operator):
    for n in range(5):
        _log_in(f"guess-{n}", "wrong", address="192.0.2.99")
    assert THROTTLED in _log_in("ops", PASSWORD, address="192.0.2.99")[1]
    # The account itself is not locked: from another address the operator gets in.
    assert _log_in("ops", PASSWORD, address="192.0.2.100")[1] == ""


def test_a_successful_log_in_is_no_failure_for_its_address(operator):
    for _ in range(4):
        _log_in("ops", "wrong")
    # Each attempt is counted before its password is checked; the right ones are taken back.
    assert _log_in("ops", PASSWORD)[1] == ""
    assert _log_in("ops", PASSWORD)[1] == ""


def test_under_the_limit_nothing_is_locked(operator):
    for _ in range(4):
        _log_in("ops", "wrong")
    assert _log_in("ops", PASSWORD)[1] == ""
    assert _login_alerts() == []


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
    assert len(locks) == 2  # the user name's from that address, and the address's
    assert all(0 < shared.ttl(key) <= settings.ADMIN_LOGIN_WINDOW_S for key in locks)


def test_guesses_sent_all_at_once_get_no_more_password_checks_than_the_limit(operator):
    # Each attempt is counted before its password is checked: a burst of guesses, all past the
    # lock check before any has failed, still gets only the limit's worth of checks.
    taken = [login_attempt_take(username="ops", address="198.51.100.9") for _ in range(12)]
    assert taken == [True] * 5 + [False] * 7
    assert _log_in("ops", PASSWORD, address="198.51.100.9")[1].count(THROTTLED) == 1
    assert _log_in("ops", PASSWORD, address="203.0.113.1")[1] == ""


@pytest.mark.django_db(transaction=True)  # the lock's alert is written from a thread
def test_attempts_from_many_threads_at_once_get_no_more_than_the_limit(operator):
    # On Redis in the services pass: every serving process counts on the same keys. An attempt
    # is counted for its name from its address and for the address, each atomically, and goes
    # on only when both counts leave it room: at most the limit, fewer when they interleave.
    start = threading.Barrier(16)

    def attempt(_: int) -> bool:
        start.wait()
        try:
            return login_attempt_take(username="ops", address="198.51.100.10")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=16) as pool:
        taken = list(pool.map(attempt, range(16)))
    assert taken.count(True) <= 5
    assert login_lock_remaining_s(username="ops", address="198.51.100.10") > 0


def test_a_lock_raises_one_alert_naming_the_name_and_the_address_but_not_the_password(operator):
    for n in range(8):
        _log_in("ops", f"hunter{n}-secret", address=ATTACKER)
    [alert] = _login_alerts()
    assert alert.severity == "warning"
    assert "'ops'" in alert.title and ATTACKER in alert.title
    assert "5 failed admin log-ins" in alert.message
    assert alert.data == {
        "username": "ops",
        "address": ATTACKER,
        "scope": "address",
        "failures": 5,
        "window_s": 900,
    }
    written = f"{alert.title} {alert.message} {alert.data}"
    assert "secret" not in written and "hunter" not in written


def test_a_name_guessed_at_from_many_addresses_is_never_locked_but_alerted_and_slowed(
    operator, settings
):
    settings.ADMIN_LOGIN_NAME_ALERT_FAILURES = 10
    for n in range(10):  # one wrong password from each of ten addresses: none at its limit
        assert WRONG in _log_in("ops", "wrong", address=f"203.0.113.{n + 1}")[1]
    [alert] = _login_alerts()
    assert alert.severity == "critical"
    assert "'ops' guessed at from many addresses" in alert.title
    assert "10 failed admin log-ins" in alert.message and "203.0.113.10" in alert.message
    # Now each address gets one failure at the name: the second from any of them is refused,
    # and a new address gets one before it is.
    assert THROTTLED in _log_in("ops", "wrong", address="203.0.113.1")[1]
    assert WRONG in _log_in("ops", "wrong", address="203.0.113.50")[1]
    assert THROTTLED in _log_in("ops", "wrong", address="203.0.113.50")[1]
    # The operators are not locked out: the right password from an address that hasn't failed.
    assert _log_in("ops", PASSWORD, address=OPERATOR)[1] == ""
    # And the addresses this locked are not an alert each.
    assert len(_login_alerts()) == 1


def _eventually(predicate, *, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_the_lock_alert_is_delivered_without_the_log_in_waiting_for_it(operator, settings):
    settings.BACKGROUND_JOBS = "inprocess"
    with FakeReceiver() as receiver:
        webhook_channel(receiver, signed=False)
        receiver.set_mode("hang", times=1)  # the first delivery gets no answer until it times out
        for n in range(4):
            _log_in("ops", f"hunter{n}-secret", address=ATTACKER)
        started = time.monotonic()
        assert WRONG in _log_in("ops", "hunter4-secret", address=ATTACKER)[1]  # the fifth locks
        assert time.monotonic() - started < 2.0
        # The delivery is under way, held by the channel, and the log-in has answered.
        _eventually(lambda: len(receiver.messages) == 1)
        assert AlertEvent.objects.get(kind="admin_login").status == "pending"
        # Waited for, not polled: the test database (SQLite in shared memory) refuses a write
        # outright while another connection reads the table.
        assert one_off_jobs_settle(15.0) == 0
        assert AlertEvent.objects.get(kind="admin_login").status == "delivered"
    sent = receiver.messages[-1]
    assert sent["data"]["username"] == "ops" and sent["data"]["address"] == ATTACKER
    assert "'ops'" in sent["title"] and ATTACKER in sent["message"]
    assert b"secret" not in sent.body and b"hunter" not in sent.body
