"""Incidents from breaker events: a provider's breaker opening starts one, closing ends it.

The router hands its events here after a request; they are written in the background, never on
the request's path, and turned into alerts there (`alerts.raising`: flap window, cooldown,
recovery).

An incident is followed by the breaker it was opened from. At a serving process's start-up
`incidents_reconcile` settles the ones a stopped process left open: resumed while the shared
state still has their breaker out, closed (as `restart`) when it doesn't.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Greatest

from alerts.raising import incident_closed, incident_opened
from gateway.aio import spawn
from gateway.engine.breaker import BreakerEvent, BreakerState, EventKind, Mode, State
from gateway.state.contract import StateStore
from providers.models import Incident, IncidentClosedReason
from runtime.background import run_db

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


async def events_record(events: list[BreakerEvent]) -> None:
    """A background job's breaker events, written before it returns."""
    worth = [e for e in events if e.kind in (EventKind.OPENED, EventKind.CLOSED)]
    if worth:
        await _write(worth)


def _still_out(breaker: BreakerState) -> bool:
    """The provider is out for the shared state: its next CLOSED event (or an operator's reset)
    will end the incident."""
    return breaker.state in (State.OPEN, State.HALF_OPEN) or breaker.mode == Mode.DISABLED


def _open_incidents() -> list[Incident]:
    return list(Incident.objects.filter(ended_at__isnull=True).order_by("-started_at", "-pk"))


def _close_at_restart(ids: list[int], at: datetime) -> int:
    # Only those still open: another process starting at the same time, or a CLOSED event
    # written meanwhile, may have ended one already.
    return Incident.objects.filter(pk__in=ids, ended_at__isnull=True).update(
        ended_at=Greatest(F("started_at"), Value(at, output_field=DateTimeField())),
        closed_reason=IncidentClosedReason.RESTART,
    )


async def incidents_reconcile(
    store: StateStore, *, now: datetime | None = None
) -> tuple[list[Incident], list[Incident]]:
    """Settle the incidents left open by processes that stopped: returns those resumed and those
    closed.

    One whose breaker the shared state still has open, half-open or forced open goes on, and its
    closing will end it and raise its recovery. Any other is closed at `now` with the reason
    `restart` and no recovery alert (nobody saw it recover); left open, it would take the next
    outage for a re-opening of itself and raise nothing for it. A store answering from this
    process's memory (Redis unreachable) can't tell: those are left as they are.
    """
    at = now or datetime.now(UTC)
    resumed: list[Incident] = []
    closing: list[Incident] = []
    seen: set[str] = set()
    for incident in await run_db(_open_incidents):
        if incident.provider in seen:  # an older one of the same provider: nothing ends it
            closing.append(incident)
            continue
        seen.add(incident.provider)
        breaker, _ = await store.read(incident.provider)
        if _still_out(breaker):
            resumed.append(incident)
        elif not store.health().get("ok", True):
            logger.warning(
                "incident of %s left open: the shared state is unreachable", incident.provider
            )
        else:
            closing.append(incident)
    if closing:
        await run_db(_close_at_restart, [incident.pk for incident in closing], at)
        for incident in closing:
            incident.ended_at = max(at, incident.started_at)
            incident.closed_reason = IncidentClosedReason.RESTART
    if resumed or closing:
        logger.info(
            "incidents left open before this start: %d resumed (%s), %d closed",
            len(resumed),
            ", ".join(incident.provider for incident in resumed) or "none",
            len(closing),
        )
    return resumed, closing
