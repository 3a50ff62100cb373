"""Refused admin log-ins as alerts: an address locked out after failed log-ins, and one user name
guessed at from many addresses.

Raised from the log-in request itself (`failover_site.admin_login`): the event is written there
and its delivery handed to the background jobs (`alert_raise`), so a log-in never waits on a
channel. Each names the user name tried and the client address; neither ever holds a password.
The cooldown keeps a lock to one message per address (or user name) however many follow it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from alerts.models import AlertEvent, EventKind, Severity
from alerts.raising import alert_raise

KEY_LENGTH = AlertEvent._meta.get_field("key").max_length or 200


class LockScope(enum.Enum):
    """What a lock refuses: one user name from one address, or every name from it."""

    NAME_AT_ADDRESS = "name_at_address"
    ADDRESS = "address"


@dataclass(frozen=True, slots=True)
class LoginLock:
    """`failures` failed log-ins within `window_s` locked `scope` for `window_s`; `username` is
    the one the locking attempt tried."""

    username: str
    address: str
    scope: LockScope
    failures: int
    window_s: int


@dataclass(frozen=True, slots=True)
class NameGuessed:
    """`failures` failed log-ins as `username` within `window_s`, from any address; `address`
    is the latest's."""

    username: str
    address: str
    failures: int
    window_s: int


def _span(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min" if minutes and not rest else f"{seconds} s"


def admin_login_locked(lock: LoginLock) -> AlertEvent:
    span = _span(lock.window_s)
    name = repr(lock.username)  # quoted: whatever the guesser typed, control characters shown
    title = f"Admin log-in locked: {name} from {lock.address}"
    if lock.scope is LockScope.ADDRESS:
        what = (
            f"{lock.failures} failed admin log-ins from {lock.address} within {span}, the "
            f"latest as {name}: that address is refused for every user name for {span}."
        )
        key = f"admin_login:address:{lock.address}"
    else:
        what = (
            f"{lock.failures} failed admin log-ins as {name} from {lock.address} within "
            f"{span}: that user name is refused from that address for {span}. From other "
            "addresses it still logs in."
        )
        key = f"admin_login:user:{lock.username.strip().lower()}"
    return alert_raise(
        kind=EventKind.ADMIN_LOGIN,
        severity=Severity.WARNING,
        key=key[:KEY_LENGTH],
        title=title,
        message=what,
        data={
            "username": lock.username,
            "address": lock.address,
            "scope": lock.scope.value,
            "failures": lock.failures,
            "window_s": lock.window_s,
        },
    )


def admin_login_guessed(guess: NameGuessed) -> AlertEvent:
    span = _span(guess.window_s)
    name = repr(guess.username)
    return alert_raise(
        kind=EventKind.ADMIN_LOGIN,
        severity=Severity.CRITICAL,
        key=f"admin_login:guessed:{guess.username.strip().lower()}"[:KEY_LENGTH],
        title=f"Admin log-in: {name} guessed at from many addresses",
        message=(
            f"{guess.failures} failed admin log-ins as {name} within {span}, the latest from "
            f"{guess.address}. The name is not locked, so its operators can still log in; for "
            f"the rest of the {span} each address gets one failed attempt at it. Check who "
            "holds the name, and block the sources at the proxy if it goes on."
        ),
        data={
            "username": guess.username,
            "address": guess.address,
            "failures": guess.failures,
            "window_s": guess.window_s,
        },
    )
