"""The admin's log-in form, throttled: password guessing against the operators' accounts,
without handing the guesser a way to lock the operators out.

Three counts, each over `ADMIN_LOGIN_WINDOW_S` from its first attempt, in Django's cache (the
process's memory embedded, Redis with REDIS_URL, so every serving process sees the same ones):

- **A user name from one client address.** After `ADMIN_LOGIN_MAX_FAILURES` failures that name
  is refused from that address for the window, before its password is even checked. From any
  other address it is not: fifty wrong passwords for `admin` from one address leave the
  operators' own log-in, from theirs, working.
- **One client address.** After `ADMIN_LOGIN_MAX_FAILURES` failures, whatever names they were
  for, the address is refused for every name (one address trying many names).
- **A user name from every address**: a guess spread over many addresses. It never locks the
  name: that would let anyone who knows the name lock its operators out, which is what the
  per-address counts are there to prevent (OWASP's caveat on account lockout; Microsoft
  Entra's smart lockout likewise locks the unfamiliar sign-ins, not the account). At
  `ADMIN_LOGIN_NAME_ALERT_FAILURES` failures it raises a critical alert, and for the rest of
  the window each address gets one failed attempt at that name instead of
  `ADMIN_LOGIN_MAX_FAILURES`: a spread guess slows down that much, while the right password
  from an address that hasn't failed still gets in.

A lock raises an alert (`alerts.logins`) naming the user name and the address, never the
password: the event is written here, its delivery handed to the background jobs. One address
locked at a name already guessed at from everywhere raises none of its own: the name's alert
covers them all, and a thousand addresses are not a thousand messages.

Each attempt is counted for its name and address before its password is checked, atomically
(the cache's incr), so guesses sent all at once can't each pass a check made before any of them
was counted. A successful log-in clears its name's count from its address; for the address it
was no failure (one good account must not reset the count of guesses at the others), and the
name's count from every address stays (an operator signing in doesn't end a guess elsewhere).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError

from alerts.logins import LockScope, LoginLock, NameGuessed, admin_login_guessed, admin_login_locked
from edge.api.access import client_address

logger = logging.getLogger(__name__)

PREFIX = "admin-login"
Subject = TypeVar("Subject")


@dataclass(frozen=True, slots=True)
class _Keys:
    counts: dict[LockScope, str]  # the counts that lock, each with its lock beside it
    name: str  # the name's count from every address: never locks

    def lock(self, scope: LockScope) -> str:
        return f"{self.counts[scope]}:locked-until"


def _keys(username: str, address: str) -> _Keys:
    # Hashed: a user name may hold any character, and case doesn't make another account's
    # guesses count apart.
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return _Keys(
        counts={
            LockScope.NAME_AT_ADDRESS: f"{PREFIX}:user:{name}:address:{address}",
            LockScope.ADDRESS: f"{PREFIX}:address:{address}",
        },
        name=f"{PREFIX}:user:{name}",
    )


def _guessed(name_failures: int) -> bool:
    return name_failures >= settings.ADMIN_LOGIN_NAME_ALERT_FAILURES


def _limits(name_failures: int) -> dict[LockScope, int]:
    """Failures each count takes before it locks: a name guessed at from everywhere gets one
    per address."""
    per_name = 1 if _guessed(name_failures) else settings.ADMIN_LOGIN_MAX_FAILURES
    return {
        LockScope.NAME_AT_ADDRESS: per_name,
        LockScope.ADDRESS: settings.ADMIN_LOGIN_MAX_FAILURES,
    }


def _count(key: str) -> int:
    """One more on `key`, atomically; its window starts at its first (add() does nothing if
    the key exists)."""
    window = settings.ADMIN_LOGIN_WINDOW_S
    cache.add(key, 0, timeout=window)
    try:
        return cache.incr(key)
    except ValueError:  # the window ended between add() and incr()
        cache.set(key, 1, timeout=window)
        return 1


def login_lock_remaining_s(*, username: str, address: str) -> float:
    """Seconds until this user name may try again from this address; 0 when it may now."""
    keys = _keys(username, address)
    locks = cache.get_many([keys.lock(scope) for scope in keys.counts])
    until = max(locks.values(), default=0.0)
    return max(0.0, until - time.time())


def login_attempt_take(*, username: str, address: str) -> bool:
    """Count one attempt for the name from this address and for the address, before its
    password is checked: False (and locked) when either has had its limit already."""
    keys = _keys(username, address)
    name_failures = cache.get(keys.name, 0)
    limits = _limits(name_failures)
    earlier = {scope: _count(key) - 1 for scope, key in keys.counts.items()}
    due = {scope: failures for scope, failures in earlier.items() if failures >= limits[scope]}
    if due:
        _lock(keys, username, address, due, guessed=_guessed(name_failures))
    return not due


def login_failure_record(*, username: str, address: str) -> None:
    """The attempt (already counted) failed: counted for the name from every address too; a
    count at its limit locks."""
    keys = _keys(username, address)
    window = settings.ADMIN_LOGIN_WINDOW_S
    name_failures = _count(keys.name)
    if name_failures == settings.ADMIN_LOGIN_NAME_ALERT_FAILURES:  # once per window: incr
        logger.warning(
            "admin log-in: %s failures for user name %r within %s s, the latest from %s",
            name_failures,
            username,
            window,
            address,
        )
        _alert(admin_login_guessed, NameGuessed(username, address, name_failures, window))
    found = cache.get_many(list(keys.counts.values()))
    limits = _limits(name_failures)
    failures = {scope: found.get(key, 0) for scope, key in keys.counts.items()}
    due = {scope: count for scope, count in failures.items() if count >= limits[scope]}
    if due:
        _lock(keys, username, address, due, guessed=_guessed(name_failures))


def login_success_record(*, username: str, address: str) -> None:
    """The attempt succeeded: its name starts afresh from its address; for the address, and
    for the name from every address, it was no failure."""
    keys = _keys(username, address)
    pair = LockScope.NAME_AT_ADDRESS
    cache.delete_many([keys.counts[pair], keys.lock(pair)])
    with contextlib.suppress(ValueError):  # its window has ended meanwhile
        cache.decr(keys.counts[LockScope.ADDRESS])


def _lock(
    keys: _Keys, username: str, address: str, due: dict[LockScope, int], *, guessed: bool
) -> None:
    window = settings.ADMIN_LOGIN_WINDOW_S
    made = [
        scope for scope in due if cache.add(keys.lock(scope), time.time() + window, timeout=window)
    ]
    if not made:
        return  # locked already, by an attempt beside this one
    scope = LockScope.ADDRESS if LockScope.ADDRESS in made else LockScope.NAME_AT_ADDRESS
    logger.warning(
        "admin log-in locked for %s s after %s failures (%s; user name %r, address %s)",
        window,
        due[scope],
        scope.value,
        username,
        address,
    )
    if scope is LockScope.NAME_AT_ADDRESS and guessed:
        return  # the name's own alert speaks for every address it locks out
    _alert(admin_login_locked, LoginLock(username, address, scope, due[scope], window))


def _alert(raiser: Callable[[Subject], object], subject: Subject) -> None:
    try:
        raiser(subject)
    except Exception:  # the log-in's answer never depends on its alert: kept in the log
        logger.exception("the admin log-in alert could not be raised: %s", subject)


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": (
            "Too many failed log-ins from this address. Try again in %(minutes)s minute%(plural)s."
        ),
    }

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if not username or not password:
            return super().clean()  # the missing field's own error; no password was tried
        address = client_address(self.request) if self.request is not None else "unknown"
        remaining = login_lock_remaining_s(username=username, address=address)
        if not remaining and not login_attempt_take(username=username, address=address):
            remaining = settings.ADMIN_LOGIN_WINDOW_S
        if remaining:
            minutes = math.ceil(remaining / 60)
            raise ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"minutes": minutes, "plural": "" if minutes == 1 else "s"},
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            login_failure_record(username=username, address=address)
            raise
        login_success_record(username=username, address=address)
        return cleaned
