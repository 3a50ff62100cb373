"""The admin's log-in form, throttled: password guessing against the operators' accounts.

After `ADMIN_LOGIN_MAX_FAILURES` failed log-ins for one user name, or from one client address,
within `ADMIN_LOGIN_WINDOW_S`, that name (or address) is refused for `ADMIN_LOGIN_WINDOW_S`,
before its password is even checked. The counters live in Django's cache: the process's memory
embedded, Redis with REDIS_URL, so every serving process sees the same ones. A successful log-in
clears its user name's counter (not the address's: one good account must not reset the count
of guesses at the others).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError

from providers.api.access import client_address

logger = logging.getLogger(__name__)

PREFIX = "admin-login"


def _keys(username: str, address: str) -> list[str]:
    # Hashed: a user name may hold any character, and case doesn't make another account's
    # guesses count apart.
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return [f"{PREFIX}:user:{name}", f"{PREFIX}:address:{address}"]


def login_lock_remaining_s(*, username: str, address: str) -> float:
    """Seconds until this user name and address may try again; 0 when neither is locked."""
    locks = cache.get_many([f"{key}:locked-until" for key in _keys(username, address)])
    until = max(locks.values(), default=0.0)
    return max(0.0, until - time.time())


def login_attempt_take(*, username: str, address: str) -> bool:
    """Count one attempt for the user name and the address before its password is checked:
    False when either has had its `ADMIN_LOGIN_MAX_FAILURES` already. Counted first, atomically
    (the cache's incr), so guesses sent all at once can't each pass a check made before any
    of them was counted."""
    window = settings.ADMIN_LOGIN_WINDOW_S
    allowed = True
    for key in _keys(username, address):
        # The count's window starts at the first attempt (add() does nothing if it exists).
        cache.add(key, 0, timeout=window)
        try:
            attempts = cache.incr(key)
        except ValueError:  # the window ended between add() and incr()
            cache.set(key, 1, timeout=window)
            attempts = 1
        if attempts > settings.ADMIN_LOGIN_MAX_FAILURES:
            allowed = False
            _lock(key, username, address, attempts - 1)
    return allowed


def login_failure_record(*, username: str, address: str) -> None:
    """The attempt (already counted) failed: a name or address at its limit is locked."""
    for key in _keys(username, address):
        failures = cache.get(key, 0)
        if failures >= settings.ADMIN_LOGIN_MAX_FAILURES:
            _lock(key, username, address, failures)


def login_success_record(*, username: str, address: str) -> None:
    """The attempt succeeded: its user name starts afresh; for its address it was no failure."""
    user_key, address_key = _keys(username, address)
    cache.delete_many([user_key, f"{user_key}:locked-until"])
    with contextlib.suppress(ValueError):  # its window has ended meanwhile
        cache.decr(address_key)


def _lock(key: str, username: str, address: str, failures: int) -> None:
    window = settings.ADMIN_LOGIN_WINDOW_S
    if cache.add(f"{key}:locked-until", time.time() + window, timeout=window):
        logger.warning(
            "admin log-in locked for %s s after %s failures (%s; user name %r, address %s)",
            window,
            failures,
            key.split(":")[1],
            username,
            address,
        )


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": (
            "Too many failed log-ins for this account or from this address. "
            "Try again in %(minutes)s minute%(plural)s."
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
