"""What the drill reads from the gateway's database once the load is over: the ledger rows of
its requests (waiting, within a bound, for the serving processes to flush them; why each tier
served them, how each provider's attempts ended, and when each request ran, for the calls
admitted after a breaker opened), the policy's cooldown, and the alerts raised since the run
started. Runs in the drill's process against a running gateway's database (the drill's own
`DATABASE_URL` must be the gateway's), or inside the embedded gateway's environment
(`manage.py shell -c`, `main`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from alerts.models import AlertEvent
from billing.models import CallRecord
from gateway.engine.clients import PREFIX_LENGTH
from gateway.routing.trickle import TRICKLE_DETAIL
from providers.models import ClientApp, FailoverPolicy, Provider

# Ids per query: well under SQLite's limit on a statement's variables.
_BATCH = 500
POLL_S = 0.25
# The skip of a provider whose breaker is open (gateway/engine/breaker.py `admit`).
BREAKER_OPEN = "breaker_open"


def collect(
    *,
    request_ids: Sequence[str],
    key: str,
    since: datetime,
    expected: int,
    wait_s: float,
    origin: float | None = None,
) -> dict[str, Any]:
    """The ledger's count of the requests (by id) and of the key's client since `since`,
    polled until both reach `expected` or `wait_s` has passed; and the alerts since `since`.

    "calls": the attempts of the requests' rows that were made (but the trickle's, let through
    an open breaker by design), and those skipped because the breaker was open, as [started,
    done, provider, outcome, reason]: the request's start (the row's created_at, made at its
    end, less its latency_ms) and end in seconds from `origin`
    (the run's start, epoch s; `since` when not given). "key_known": whether this database
    holds the key's client app (False: most likely not the gateway's database); "timeouts":
    each provider's timeout in seconds, by name."""
    zero = since.timestamp() if origin is None else origin
    ids = [value for value in (_uuid(raw) for raw in request_ids) if value is not None]
    app = ClientApp.objects.filter(key_prefix=key[:PREFIX_LENGTH]).first()
    started = time.monotonic()
    while True:
        matched = sum(
            CallRecord.objects.filter(request_id__in=ids[i : i + _BATCH]).count()
            for i in range(0, len(ids), _BATCH)
        )
        client_rows = (
            CallRecord.objects.filter(client=app.name, created_at__gte=since).count()
            if app is not None
            else None
        )
        waited = time.monotonic() - started
        settled = matched >= len(ids) and (client_rows is None or client_rows >= expected)
        # A database that knows neither the key nor any request is not the gateway's: no wait
        # makes its rows appear.
        elsewhere = app is None and matched == 0
        if settled or elsewhere or waited >= wait_s:
            break
        time.sleep(POLL_S)
    reasons: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    calls: list[list[Any]] = []
    for i in range(0, len(ids), _BATCH):
        rows = CallRecord.objects.filter(request_id__in=ids[i : i + _BATCH]).values_list(
            "tier", "reason", "attempts", "created_at", "latency_ms"
        )
        for tier, reason, tried, created_at, latency_ms in rows:
            reasons[f"{tier}: {reason}" if reason else tier] += 1
            done = created_at.timestamp() - zero
            started = done - latency_ms / 1000
            for attempt in tried or []:
                how = attempt.get("error_class") or attempt.get("outcome") or "?"
                attempts[f"{attempt.get('provider', '?')}: {how}"] += 1
                outcome, why = attempt.get("outcome", ""), attempt.get("error_class", "")
                if str(attempt.get("detail", "")).startswith(TRICKLE_DETAIL):
                    continue  # let through past an open breaker by design (routing/trickle.py)
                if outcome != "skipped" or why == BREAKER_OPEN:
                    calls.append(
                        [round(started, 3), round(done, 3), attempt.get("provider", ""),
                         outcome, why]
                    )  # fmt: skip
    alerts = [
        {
            "at": round((event.created_at - since).total_seconds(), 1),
            "kind": event.kind,
            "severity": event.severity,
            "key": event.key,
            "title": event.title,
            "status": event.status,
        }
        for event in AlertEvent.objects.filter(created_at__gte=since).order_by("created_at", "id")
    ]
    timeouts = Provider.objects.values_list("name", "timeout_s")
    return {
        "matched": matched,
        "client_rows": client_rows,
        "waited_s": round(waited, 2),
        "ids_missing": len(request_ids) - len(ids),
        "reasons": dict(reasons.most_common()),
        "attempts": dict(attempts.most_common()),
        "calls": calls,
        "cooldown_s": _cooldown_s(),
        "key_known": app is not None,
        "timeouts": {name: float(t) for name, t in timeouts},
        "alerts": alerts,
    }


def _uuid(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def main(spec_path: str, out_path: str) -> None:
    """`manage.py shell -c` entry: the spec's JSON in, the collected JSON out."""
    spec = json.loads(Path(spec_path).read_text())
    found = collect(
        request_ids=spec["request_ids"],
        key=spec["key"],
        since=datetime.fromisoformat(spec["since"]),
        expected=spec["expected"],
        wait_s=spec["wait_s"],
        origin=spec.get("origin"),
    )
    Path(out_path).write_text(json.dumps(found))


def _cooldown_s() -> float:
    """The policy's breaker cooldown, read without making a policy row where there is none (a
    database that isn't the gateway's, in URL mode): then the model's default."""
    row = FailoverPolicy.objects.filter(pk=FailoverPolicy.SINGLETON_ID).only("cooldown_s").first()
    if row is None:
        return float(FailoverPolicy._meta.get_field("cooldown_s").get_default())
    return float(row.cooldown_s)
