"""The Redis work one gateway request costs: commands and round trips, the background apart.

After a gateway+redis target's sweep: a warm-up, then exactly N requests one after another on
one keep-alive connection between two `INFO all` snapshots, then the same snapshots over the
same duration with no requests (the background: the config-version poll every 0.5 s, the
sentinel watch, …), subtracted. What is counted:

- round trips: the server's read events (`total_reads_processed`). redis-py writes one command,
  one script call or one whole pipeline in one write, which the server reads in one event
  (checked on the dedicated server when it starts): a pipeline is one trip, a script call is one;
- the commands the gateway sent, by name, and the commands run inside its scripts (commandstats
  counts both alike): from MONITOR on db 12, on a dedicated server only;
- commandstats and total_commands_processed, per command (sent and inside scripts together).

On the shared server every INFO counter is server-wide (other dbs' clients, e.g. parallel test
runs, are counted too) and MONITOR is not used: the figures then carry that caveat.
"""

from __future__ import annotations

import http.client
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from procs import BENCH_KEY
from redisbench import REDIS_DB, Counters, Event, MonitorTap, RedisServer

SHARED_CAVEAT = (
    "shared Redis server: INFO counters are server-wide, so clients of other dbs (parallel test "
    "runs) are counted too, and commandstats counts commands run inside scripts like sent ones; "
    "the background subtraction removes only steady traffic"
)
# A script call is one command sent and one trip, whatever it runs inside.
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


class KeepAlive:
    """POSTs one after another on one keep-alive connection (reconnecting if it closes)."""

    def __init__(self, url: str, body: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        self.body = body.encode()
        self.conn: http.client.HTTPConnection | None = None

    def post(self) -> int:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            try:
                self.conn.request(
                    "POST",
                    self.path,
                    self.body,
                    {"Content-Type": "application/json", "Authorization": f"Bearer {BENCH_KEY}"},
                )
                response = self.conn.getresponse()
                response.read()
                if response.will_close:
                    self.close()
                return response.status
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def count_per_request(
    redis: RedisServer, url: str, body: str, requests: int, warmup: int = 200
) -> dict[str, Any]:
    """Redis commands and round trips per request: a burst of exactly `requests` requests,
    minus the background over the same duration."""
    client = KeepAlive(url, body)
    own = redis.snapshot_source()
    tap = MonitorTap(redis) if redis.dedicated else None
    events: list[Event] = []
    try:
        for _ in range(warmup):
            client.post()
        time.sleep(0.5)  # what the warm-up left in flight lands before the count
        statuses: Counter[int] = Counter()
        before = redis.snapshot()
        for _ in range(requests):
            statuses[client.post()] += 1
        time.sleep(0.25)  # the last requests' own writes after their answers
        burst = redis.snapshot() - before
        client.close()
        idle_from = redis.snapshot()
        time.sleep(burst.at)
        idle = redis.snapshot() - idle_from
    finally:
        client.close()
        if tap is not None:
            events = tap.stop()
    sent = _monitored(events, own) if tap is not None else None
    return summarize_count(burst, idle, requests, dict(statuses), redis.dedicated, sent)


def _monitored(events: list[Event], own: str) -> tuple[Counter[str], Counter[str]] | None:
    """(burst, idle) counts of db 12's commands by `sent:<name>` / `lua:<name>`, between the
    four snapshots' own INFO lines; None if they are not all in the stream."""
    marks = [i for i, e in enumerate(events) if e.source == own and e.command == "info"]
    if len(marks) < 4:
        return None

    def window(start: int, end: int) -> Counter[str]:
        return Counter(
            f"{'lua' if e.source == 'lua' else 'sent'}:{e.command}"
            for e in events[start + 1 : end]
            if e.db == REDIS_DB
        )

    return window(marks[0], marks[1]), window(marks[2], marks[3])


def summarize_count(
    burst: Counters,
    idle: Counters,
    requests: int,
    statuses: dict[int, int],
    dedicated: bool,
    monitored: tuple[Counter[str], Counter[str]] | None = None,
) -> dict[str, Any]:
    scale = burst.at / idle.at if idle.at > 0 else 1.0  # the idle window is as long, give or take

    def per_request(burst_n: float, idle_n: float) -> float:
        return round((burst_n - idle_n * scale) / requests, 3)

    def per_name(burst_c: dict[str, int], idle_c: dict[str, int]) -> dict[str, float]:
        names = sorted(set(burst_c) | set(idle_c))
        rows = {n: per_request(burst_c.get(n, 0), idle_c.get(n, 0)) for n in names}
        return {n: v for n, v in rows.items() if abs(v) >= 0.0005}

    def per_s(counts: dict[str, int]) -> dict[str, float]:
        return {k: round(v / idle.at, 2) for k, v in sorted(counts.items())} if idle.at else {}

    trips = per_request(burst.reads, idle.reads)
    result: dict[str, Any] = {
        "requests": requests,
        "statuses": statuses,
        "seconds": round(burst.at, 2),
        "server": "dedicated" if dedicated else "shared",
        "caveat": None if dedicated else SHARED_CAVEAT,
        "round_trips_per_request": trips,
        "commandstats_per_request": per_name(burst.commands, idle.commands),
        "commands_processed_per_request": per_request(burst.total_commands, idle.total_commands),
        "sent_per_request": None,
        "in_scripts_per_request": None,
        "background_per_s": {
            "seconds": round(idle.at, 2),
            "round_trips": round(idle.reads / idle.at, 2) if idle.at else None,
            "commands": per_s(idle.commands),
        },
    }
    if monitored is not None:
        rows = per_name(*monitored)
        result["sent_per_request"] = {k[5:]: v for k, v in rows.items() if k.startswith("sent:")}
        result["in_scripts_per_request"] = {
            k[4:]: v for k, v in rows.items() if k.startswith("lua:")
        }
        result["background_per_s"]["sent"] = {
            k[5:]: v for k, v in per_s(monitored[1]).items() if k.startswith("sent:")
        }
    # The derivation: a script call is one trip; the other trips carry the other commands sent
    # (more than one per trip: pipelines).
    known = result["sent_per_request"] or result["commandstats_per_request"]
    scripts = round(sum(known.get(name, 0) for name in SCRIPT_COMMANDS), 3)
    other_trips = round(trips - scripts, 3)
    result["script_trips_per_request"] = scripts
    result["other_trips_per_request"] = other_trips
    if result["sent_per_request"] is not None:
        other_sent = sum(v for k, v in known.items() if k not in SCRIPT_COMMANDS)
        result["commands_per_other_trip"] = (
            round(other_sent / other_trips, 2) if other_trips > 0.005 else None
        )
    return result


def _names(counts: dict[str, float] | None, digits: int = 2) -> str:
    """`evalsha 1.00, hget 0.003`: a figure under 0.1 keeps three digits (a read every 0.5 s
    shared by a few hundred requests shows as what it is, not as 0.00)."""
    if not counts:
        return "none"
    return ", ".join(f"{k} {v:.{3 if abs(v) < 0.1 else digits}f}" for k, v in counts.items())


def print_counts(counts: dict[str, dict[str, Any]], width: int) -> None:
    if not counts:
        return
    first = next(iter(counts.values()))
    print()
    print(
        f"Redis work per request ({first['requests']:,} requests one after another on one "
        f"keep-alive connection, minus the background over the same duration; "
        f"{first['server']} server)"
    )
    print(
        "  round trips = the server's read events (redis-py writes one command, one script call "
        "or one whole pipeline at a time);\n  a script call (evalsha/eval) is one trip, "
        "whatever it runs inside; the other trips carry the other commands sent"
    )
    pad = f"  {'':<{width}}   "
    for target, count in counts.items():
        per_trip = count.get("commands_per_other_trip")
        print(
            f"  {target:<{width}} {count['round_trips_per_request']:.2f} round trips = "
            f"{count['script_trips_per_request']:.2f} script calls + "
            f"{count['other_trips_per_request']:.2f} other trips"
            + (f" of {per_trip:.2f} commands each" if per_trip is not None else "")
            + (" (pipelines)" if per_trip is not None and per_trip > 1.05 else "")
        )
        if count["sent_per_request"] is not None:
            print(f"{pad}sent: {_names(count['sent_per_request'])}")
            print(f"{pad}run inside the scripts: {_names(count['in_scripts_per_request'])}")
        print(
            f"{pad}commandstats (sent and inside scripts): "
            f"{count['commands_processed_per_request']:.2f} commands: "
            f"{_names(count['commandstats_per_request'])}"
        )
        bg = count["background_per_s"]
        print(
            f"{pad}background (no requests, {bg['seconds']:.1f} s): "
            f"{bg['round_trips']} round trips/s; per s: {_names(bg['commands'], 1)}"
        )
        if bad := {s: n for s, n in count["statuses"].items() if s != 200}:
            print(f"{pad}NON-200 answers during the count: {bad}")
    for caveat in {c["caveat"] for c in counts.values() if c["caveat"]}:
        print(f"  caveat: {caveat}")
