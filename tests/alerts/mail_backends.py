"""Mail backends that fail the way SMTP servers do, for the e-mail channel's error table."""

from __future__ import annotations

import smtplib
from collections.abc import Sequence
from typing import Any

from django.core.mail.backends.base import BaseEmailBackend


class _Failing(BaseEmailBackend):
    error: BaseException

    def send_messages(self, email_messages: Sequence[Any]) -> int:
        raise self.error


class RecipientsRefused(_Failing):
    error = smtplib.SMTPRecipientsRefused({"ops@example.com": (550, b"5.1.1 No such user")})


class AuthenticationFailed(_Failing):
    error = smtplib.SMTPAuthenticationError(535, b"5.7.8 Authentication credentials invalid")


class ServerDisconnected(_Failing):
    error = smtplib.SMTPServerDisconnected("Connection unexpectedly closed")


class TimedOut(_Failing):
    error = TimeoutError("timed out")


class Greylisted(_Failing):
    error = smtplib.SMTPDataError(451, b"4.7.1 Greylisted, try again later")
