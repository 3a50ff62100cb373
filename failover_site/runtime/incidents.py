"""Incidents from breaker events: a provider's breaker opening starts one, closing ends it.

The router hands its events here after a request; they are written in the background, never on
the request's path, and turned into alerts there (`alerts.raising`: flap window, cooldown,
recovery).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from alerts.raising import incident_closed, incident_opened
from failover_site.runtime.background import run_db
from providers.aio import spawn
from providers.engine.breaker import BreakerEvent, EventKind
from providers.models import Incident

logger = logging.getLogger(__name__)


def incidents_record(events: Iterable[BreakerEvent]) -> tuple[list[Incident], list[Incident]]:
    """Apply breaker events to the incidents: returns those it opened and those it closed."""
    opened: list[Incident] = []
    closed: list[Incident] = []
    for event in events:
        at = datetime.fromtimestamp(event.at, UTC)
        open_incident = (
            Incident.objects.filter(provider=event.provider, ended_at__isnull=True)
            .order_by("-started_at")
            .first()
        )
        if event.kind == EventKind.OPENED:
            if open_incident is None:
                opened.append(
                    Incident.objects.create(
                        provider=event.provider, started_at=at, reason=event.reason
                    )
                )
            else:  # opened again after a failed half-open round: the same incident
                open_incident.reopened += 1
                open_incident.save(update_fields=["reopened"])
        elif event.kind == EventKind.CLOSED and open_incident is not None:
            open_incident.ended_at = max(at, open_incident.started_at)
            open_incident.save(update_fields=["ended_at"])
            closed.append(open_incident)
    return opened, closed


def incidents_and_alerts(events: list[BreakerEvent]) -> None:
    opened, closed = incidents_record(events)
    for incident in opened:
        incident_opened(incident)
    for incident in closed:
        incident_closed(incident)


async def _write(events: list[BreakerEvent]) -> None:
    try:
        await run_db(incidents_and_alerts, events)
    except Exception:
        logger.exception("incidents could not be recorded")


def note_events(events: list[BreakerEvent]) -> None:
    """Hand a request's breaker events over, without waiting."""
    worth = [e for e in events if e.kind in (EventKind.OPENED, EventKind.CLOSED)]
    if worth:
        spawn(_write(worth))
