"""Alerts from the health sentinel's verdicts: a provider degraded, then down, then healthy
again (its recovery).

The sentinel's job hands each move of a verdict over once (the store dates a status from the
result that set it, so exactly one check sees it move, whichever process ran it); the alert
policy (`alerts.raising.alert_raise`) keeps one alert per provider and status per cooldown, so
a provider flapping between healthy and degraded is one message until the cooldown is out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from alerts.estimate import spoken
from alerts.models import AlertEvent
from alerts.outlook import runbook_lines, spend_sentence
from alerts.raising import SENT, alert_raise
from providers.models import FailoverPolicy
from providers.selectors import policy_get

HEALTHY, DEGRADED, DOWN, UNKNOWN = "healthy", "degraded", "down", "unknown"
BAD = (DEGRADED, DOWN)


@dataclass(frozen=True, slots=True)
class VerdictMove:
    """A verdict that just moved: `provider` is `status` since `at`, from `window` (the last
    results, newest last; True a good check), the last check's `detail`; it was `previous`
    since `previous_since` (0 for never)."""

    provider: str
    status: str
    previous: str
    previous_since: float
    at: float
    window: tuple[bool, ...]
    detail: str = ""

    @property
    def worth_alerting(self) -> bool:
        """Into degraded or down, or out of them: a first verdict of healthy says nothing."""
        if self.status == self.previous:
            return False
        return self.status in BAD or (self.status == HEALTHY and self.previous in BAD)


def _clock(policy: FailoverPolicy, at: float) -> str:
    return f"{datetime.fromtimestamp(at, ZoneInfo(policy.time_zone)):%H:%M:%S %Z}"


def failing_checks(move: VerdictMove) -> str:
    """ "3/5 failed: /api/tags: model llama3.1:8b is not pulled", from the sentinel's window."""
    bad = move.window.count(False)
    text = f"{bad}/{len(move.window)} health checks failed"
    if move.window and not move.window[-1]:
        return f"{text}: {move.detail or 'no detail'}"
    return f"{text} (the latest passed)"


def _degraded_since(move: VerdictMove, policy: FailoverPolicy) -> float:
    """When the bad stretch this move belongs to began: a degraded verdict's own start, or
    for down and the way back, the start its degraded alert noted (a down verdict is dated
    from its own move)."""
    if move.status == DEGRADED:
        return move.at
    if move.previous == DEGRADED and move.previous_since:
        return move.previous_since
    noted = (
        AlertEvent.objects.filter(kind="health", data__provider=move.provider)
        .order_by("-created_at", "-id")
        .values_list("data", flat=True)
        .first()
    )
    since = noted.get("degraded_since") if isinstance(noted, dict) else None
    # Only the stretch that led to this down verdict: degraded at most the down delay (and a
    # few checks) before it.
    earliest = move.previous_since - policy.sentinel_down_after_s - 3 * policy.sentinel_interval_s
    if isinstance(since, int | float) and earliest <= since <= move.previous_since:
        return float(since)
    return move.previous_since or move.at


def _was_alerted(provider: str) -> bool:
    """Whether the operator heard of the bad stretch a recovery ends: its latest health event
    went out (or was held back by the cooldown, behind one that did)."""
    latest = (
        AlertEvent.objects.filter(kind="health", data__provider=provider)
        .order_by("-created_at", "-id")
        .values_list("data__status", "status", "suppressed_reason")
        .first()
    )
    if latest is None:
        return False
    status, sent, why = latest
    return status in BAD and (sent in SENT or why == "cooldown")


def verdict_moved(move: VerdictMove) -> AlertEvent | None:
    """Raise the alert for a verdict's move (None for one not worth an alert)."""
    if not move.worth_alerting:
        return None
    if move.status == HEALTHY and not _was_alerted(move.provider):
        return None
    policy = policy_get()
    since = _degraded_since(move, policy)
    spend, spend_data = spend_sentence(policy, datetime.fromtimestamp(move.at, UTC))
    name = move.provider
    was = "had no recent verdict" if move.previous == UNKNOWN else f"was {move.previous}"
    data: dict[str, Any] = {
        "provider": name,
        "status": move.status,
        "previous": move.previous,
        "degraded_since": since,
        "failed_checks": move.window.count(False),
        "checks": len(move.window),
        **spend_data,
    }
    if move.status == DEGRADED:
        severity, title = "warning", f"{name} degraded: {failing_checks(move)}"
        lines = [
            f"{name} {was}; now degraded (since {_clock(policy, since)}): {failing_checks(move)}.",
            "High-priority requests go to the next provider; the others stay. It is down "
            f"(skipped by every request) after {spoken(policy.sentinel_down_after_s)} degraded.",
        ]
    elif move.status == DOWN:
        severity, title = "critical", f"{name} down: skipped by every request"
        lines = [
            f"{name} {was} for {spoken(move.at - since)} (since {_clock(policy, since)}); now "
            f"down: {failing_checks(move)}.",
            "Every request skips it until the last "
            f"{policy.sentinel_window} health checks have all passed.",
        ]
    else:
        severity, title = "info", f"{name} healthy again"
        lines = [
            f"{name} {was} (degraded or down for {spoken(move.at - since)}, since "
            f"{_clock(policy, since)}); the last {len(move.window)} health checks passed.",
        ]
    lines.append(spend)
    runbook = runbook_lines(name) if move.status in BAD else []
    if runbook:
        data["runbook"] = runbook
    return alert_raise(
        kind="health",
        severity=severity,
        key=f"health:{name}:{move.status}",
        title=title[:200],
        message="\n".join(lines),
        data=data,
    )
