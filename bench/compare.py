"""The baseline (`--baseline DIR`: another commit's checkout) against this tree, per gateway."""

from __future__ import annotations

from typing import Any

from wrkrun import Run

BASELINE_LABEL = "@baseline"
OTEL_LABEL = "+otel"  # this tree, exporting traces (bench_complete.py --otel)


def baseline_of(target: str) -> str:
    """`gateway+redis[aiohttp]` → `gateway+redis@baseline[aiohttp]`."""
    name, bracket, rest = target.partition("[")
    return f"{name}{BASELINE_LABEL}{bracket}{rest}"


def _ratio(new: float, old: float) -> float | None:
    return round(new / old, 3) if old and old == old and new == new else None


def compare(runs: list[Run], connections: list[int]) -> dict[str, list[dict[str, Any]]]:
    """Per gateway of this tree that has a baseline twin: req/s, p50 and p99 of both per
    connection count, and new/baseline."""
    by = {(r.target, r.connections): r for r in runs}
    targets = list(dict.fromkeys(r.target for r in runs))
    table: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        if not target.startswith("gateway") or BASELINE_LABEL in target:
            continue
        twin = baseline_of(target)
        rows = []
        for c in connections:
            new, old = by.get((target, c)), by.get((twin, c))
            if new is None or old is None:
                continue
            rows.append(
                {
                    "connections": c,
                    "rps": new.rps,
                    "baseline_rps": old.rps,
                    "rps_ratio": _ratio(new.rps, old.rps),
                    "p50_ms": new.p50_ms,
                    "baseline_p50_ms": old.p50_ms,
                    "p50_ratio": _ratio(new.p50_ms, old.p50_ms),
                    "p99_ms": new.p99_ms,
                    "baseline_p99_ms": old.p99_ms,
                    "p99_ratio": _ratio(new.p99_ms, old.p99_ms),
                }
            )
        if rows:
            table[target] = rows
    return table


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_comparison(
    table: dict[str, list[dict[str, Any]]], baseline: dict[str, Any], width: int
) -> None:
    if not table:
        return
    print()
    print(
        f"Baseline vs this tree (ratio = this tree / baseline; baseline {baseline['commit']} "
        f"{baseline['subject']!r} in {baseline['dir']})"
    )
    print(f"  req/s ratio > 1 is faster, latency ratio < 1 is faster; {baseline['interleaving']}")
    header = (
        f"  {'gateway':<{width}} {'conns':>5} {'req/s':>9} {'base':>9} {'ratio':>6} "
        f"{'p50 ms':>7} {'base':>7} {'ratio':>6} {'p99 ms':>7} {'base':>7} {'ratio':>6}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for target, rows in table.items():
        for row in rows:
            print(
                f"  {target:<{width}} {row['connections']:>5} {row['rps']:>9.1f} "
                f"{row['baseline_rps']:>9.1f} {_r(row['rps_ratio']):>6} "
                f"{row['p50_ms']:>7.2f} {row['baseline_p50_ms']:>7.2f} "
                f"{_r(row['p50_ratio']):>6} {row['p99_ms']:>7.2f} "
                f"{row['baseline_p99_ms']:>7.2f} {_r(row['p99_ratio']):>6}"
            )


def tracing_cost(runs: list[Run], connections: list[int]) -> dict[str, list[dict[str, Any]]]:
    """Per traced gateway (`--otel`): req/s with and without tracing at each connection count,
    their ratio, and the CPU time a request gains on the gateway's one core."""
    by = {(r.target, r.connections): r for r in runs}
    table: dict[str, list[dict[str, Any]]] = {}
    for target in dict.fromkeys(r.target for r in runs):
        if OTEL_LABEL not in target:
            continue
        twin = target.replace(OTEL_LABEL, "")
        rows = []
        for c in connections:
            on, off = by.get((target, c)), by.get((twin, c))
            if on is None or off is None or not on.rps or not off.rps:
                continue
            rows.append(
                {
                    "connections": c,
                    "rps_off": off.rps,
                    "rps_on": on.rps,
                    "ratio": _ratio(on.rps, off.rps),
                    "added_us": round((1 / on.rps - 1 / off.rps) * 1e6, 1),
                    "p50_off_ms": off.p50_ms,
                    "p50_on_ms": on.p50_ms,
                }
            )
        if rows:
            table[target] = rows
    return table


def print_tracing(
    table: dict[str, list[dict[str, Any]]], counts: dict[str, Any], width: int
) -> None:
    if not table:
        return
    print()
    print("Tracing (this tree exporting every request's spans over OTLP/HTTP, beside it without)")
    print("  added µs = 1/req/s on − 1/req/s off: the gateway's one core per request")
    header = (
        f"  {'gateway':<{width}} {'conns':>5} {'off':>9} {'on':>9} {'ratio':>6} "
        f"{'added µs':>9} {'p50 off':>8} {'p50 on':>8}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for target, rows in table.items():
        for row in rows:
            print(
                f"  {target:<{width}} {row['connections']:>5} {row['rps_off']:>9.1f} "
                f"{row['rps_on']:>9.1f} {_r(row['ratio']):>6} {row['added_us']:>9.1f} "
                f"{row['p50_off_ms']:>8.2f} {row['p50_on_ms']:>8.2f}"
            )
    for target, seen in counts.items():
        print(
            f"  {target}: the receiver took {seen['spans']:,} spans in {seen['exports']:,} exports"
        )
