"""E-mail through Django's mail backend (EMAIL_URL in the settings).

config: {"to": ["ops@example.com", "oncall@example.com"]}
"""

from __future__ import annotations

import smtplib
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email

from alerts.channels.base import Alert, Channel, ConfigErrors, TransportError, event_body

# The server refused the addresses, the sender or our credentials: the same mail will be
# refused again. Anything else from SMTP or the socket (a timeout, a 4xx greylisting, a dropped
# connection) may pass.
PERMANENT_ERRORS: tuple[type[smtplib.SMTPException], ...] = (
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPAuthenticationError,
)


class EmailChannel(Channel):
    kind = "email"
    label = "E-mail"
    config_help = 'E-mail: {"to": ["ops@example.com", "oncall@example.com"]}.'

    @classmethod
    def clean_config(cls, config: Any) -> dict[str, Any]:
        errors = ConfigErrors(config, allowed=("to",))
        to = errors.config.get("to")
        addresses: list[str] = []
        if to is None or to == [] or to == "":
            errors.add("to", 'is required: a list of addresses, e.g. ["ops@example.com"].')
        elif not isinstance(to, list) or not all(isinstance(a, str) for a in to):
            errors.add("to", 'must be a list of addresses, e.g. ["ops@example.com"].')
        else:
            addresses = [address.strip() for address in to]
            bad = []
            for address in addresses:
                try:
                    validate_email(address)
                except ValidationError:
                    bad.append(address)
            if bad:
                errors.add("to", f"not an e-mail address: {', '.join(map(repr, bad))}.")
        errors.raise_if_any()
        return {"to": addresses}

    def send(self, event: Alert) -> None:
        # A header can't hold a line break: the title goes on one line.
        title = " ".join(event.title.split())
        subject = f"[{event.severity.upper()}] {title}"[:200]
        try:
            sent = send_mail(
                subject,
                f"{event.title}\n\n{event_body(event)}".strip(),
                None,  # DEFAULT_FROM_EMAIL
                self.config["to"],
                fail_silently=False,
            )
        except PERMANENT_ERRORS as exc:
            raise TransportError(f"The mail server refused: {exc}", permanent=True) from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"Could not send the e-mail: {exc}") from exc
        if not sent:
            raise TransportError("The mail backend sent nothing.")
