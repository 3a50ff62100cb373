"""Delivering an event to its channels: bounded retries for transient errors, none for
permanent ones, every outcome kept on the event and the channel.

Runs in the background (a Celery task or a thread), never on a request's path: a send may take
up to its timeout per attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from alerts.channels import TransportError, channel_for
from alerts.models import (
    AlertChannel,
    AlertEvent,
    EventKind,
    EventStatus,
    Severity,
    severities_up_to,
)

logger = logging.getLogger(__name__)

Sleep = Callable[[float], None]

MAX_ATTEMPTS = 3
# The waits before the second and third attempts.
BACKOFF_S = (0.5, 1.0)
# A channel may ask for a longer wait (Telegram's retry_after, Retry-After); past this the
# attempt is given up rather than holding the worker.
MAX_RETRY_AFTER_S = 5.0

# Nothing left to do for these: sent everywhere, sent nowhere on purpose, or nowhere to send.
# A rerun (a Celery retry after a worker crash) returns them as they are.
FINAL_STATUSES = (EventStatus.DELIVERED, EventStatus.SUPPRESSED, EventStatus.NO_CHANNEL)


def deliver_event(event_id: int, *, sleep: Sleep = time.sleep) -> AlertEvent:
    """Send the event to every enabled channel whose minimum severity it meets.

    Idempotent: channels already recorded as delivered are not sent to again, and an event
    already delivered, suppressed or without a channel is returned unchanged. Each channel's
    result is saved as soon as it is known, so a crash mid-way loses nothing already sent.
    """
    event = AlertEvent.objects.get(pk=event_id)
    if event.status in FINAL_STATUSES:
        return event
    channels = AlertChannel.objects.filter(
        enabled=True, min_severity__in=severities_up_to(event.severity)
    ).order_by("name")
    return _deliver(event, channels, sleep=sleep, max_attempts=MAX_ATTEMPTS)


def send_test_alert(channel: AlertChannel, *, requested_by: str = "") -> AlertEvent:
    """Send a test alert to this one channel, once (no retries: the operator is waiting), and
    keep it as a "test" event with its result.

    It goes out even when the channel is switched off or its minimum severity is higher: the
    operator is checking the channel itself. A permanent error still switches it off.
    """
    who = f" by {requested_by}" if requested_by else ""
    event = AlertEvent.objects.create(
        kind=EventKind.TEST,
        severity=Severity.INFO,
        key=f"test:{channel.pk}",
        title="Test alert from the AI failover gateway",
        message=f'If you can read this, the channel "{channel.name}" works. '
        f"Sent from the admin{who}.",
        data={"channel": channel.name, "requested_by": requested_by},
    )
    return _deliver(event, [channel], sleep=time.sleep, max_attempts=1)


def _deliver(
    event: AlertEvent,
    channels: Iterable[AlertChannel],
    *,
    sleep: Sleep,
    max_attempts: int,
) -> AlertEvent:
    targets = list(channels)
    done = {entry.get("channel_id") for entry in _entries(event) if entry.get("ok")}
    for channel in targets:
        if channel.pk in done:
            continue
        result = _send_with_retries(event, channel, sleep=sleep, max_attempts=max_attempts)
        event = _record(event.pk, result)
    # Channels an earlier run delivered to count even if they have since been switched off.
    results = _entries(event)
    delivered = {entry.get("channel_id") for entry in results if entry.get("ok")}
    attempted = {entry.get("channel_id") for entry in results} | {c.pk for c in targets}
    if not attempted:
        status = EventStatus.NO_CHANNEL
    elif attempted <= delivered:
        status = EventStatus.DELIVERED
    elif delivered:
        status = EventStatus.PARTLY_DELIVERED
    else:
        status = EventStatus.FAILED
    AlertEvent.objects.filter(pk=event.pk).update(status=status)
    event.status = status
    return event


def _send_with_retries(
    event: AlertEvent, channel: AlertChannel, *, sleep: Sleep, max_attempts: int
) -> dict[str, Any]:
    attempts = 0
    error: TransportError | None = None
    while attempts < max_attempts:
        attempts += 1
        try:
            channel_for(channel).send(event.as_alert())
        except TransportError as exc:
            error = exc
        except Exception as exc:
            # A bug in a channel must not stop the others, nor be retried as if it might pass.
            logger.exception("alert channel %s failed unexpectedly", channel.name)
            error = TransportError(f"Unexpected error: {type(exc).__name__}: {exc}")
            break
        else:
            error = None
            break
        logger.warning(
            "alert %s to %s, attempt %d: %s%s",
            event.pk,
            channel.name,
            attempts,
            error.message,
            " (permanent)" if error.permanent else "",
        )
        if error.permanent or attempts >= max_attempts:
            break
        sleep(_wait_before(attempts, error))
    now = timezone.now()
    if error is None:
        AlertChannel.objects.filter(pk=channel.pk).update(last_sent_at=now)
    else:
        _channel_failed(channel, error, now=now)
    return {
        "channel": channel.name,
        "channel_id": channel.pk,
        "kind": channel.kind,
        "ok": error is None,
        "attempts": attempts,
        "error": "" if error is None else error.message,
        "permanent": bool(error and error.permanent),
        "at": now.isoformat(),
    }


def _wait_before(attempt: int, error: TransportError) -> float:
    """The wait before attempt `attempt + 1`: the backoff, or longer if the channel asked."""
    wait = BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1]
    if error.retry_after is not None:
        wait = max(wait, error.retry_after)
    return min(wait, MAX_RETRY_AFTER_S)


def _channel_failed(channel: AlertChannel, error: TransportError, *, now: Any) -> None:
    fields: dict[str, Any] = {"last_error": error.message, "last_error_at": now}
    if error.permanent:
        fields.update(enabled=False, disabled_at=now, disabled_reason=error.message)
        logger.error("alert channel %s switched off: %s", channel.name, error.message)
    AlertChannel.objects.filter(pk=channel.pk).update(**fields)
    for name, value in fields.items():
        setattr(channel, name, value)


def _record(event_id: int, result: dict[str, Any]) -> AlertEvent:
    """Merge one channel's result into the event's, under a row lock, so two runs of the same
    delivery never overwrite each other's results."""
    with transaction.atomic():
        event = AlertEvent.objects.select_for_update().get(pk=event_id)
        entries = [e for e in _entries(event) if e.get("channel_id") != result["channel_id"]]
        event.deliveries = [*entries, result]
        event.save(update_fields=["deliveries"])
    return event


def _entries(event: AlertEvent) -> list[dict[str, Any]]:
    return [entry for entry in event.deliveries or [] if isinstance(entry, dict)]
