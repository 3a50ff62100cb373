"""The report: the machine, the results table, the ratios, the bar, and the JSON of it all."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from compare import compare, print_comparison, print_tracing, tracing_cost
from procs import LOAD_CPU, SERVER_CPU
from profiling import print_profiles
from rediscount import print_counts
from targets import CHAT_BODY, GATEWAY_BODY, MODEL, UPSTREAM_BODY, Bench
from wrkrun import WRK_TIMEOUT

# The bar: 20 × LiteLLM's 75–92 req/s on one core, and half of the bare proxy.
LITELLM_RPS = (75, 92)
BAR_FACTOR = 20
BAR_RPS = BAR_FACTOR * LITELLM_RPS[1]  # 1,840
BAR_PASSTHROUGH = 0.5


def machine_facts(python: str, pin: bool) -> dict[str, Any]:
    probe = (
        "import json, sys, importlib.metadata as m\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        "names = ('uvloop', 'httptools', 'uvicorn', 'httpx', 'aiohttp',"
        " 'Django', 'redis', 'hiredis', 'sniffio')\n"
        "print(json.dumps({'python': sys.version.split()[0], **{n: v(n) for n in names}}))"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    packages = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr}
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, timeout=10).stdout.strip()
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
        "server_python": packages.pop("python", None),
        "packages": packages,
        "uvloop_present": bool(packages.get("uvloop")),
        "wrk": (wrk_version.stdout + wrk_version.stderr).strip().splitlines()[0:1],
        "pinning": (
            f"taskset: measured server on CPU {SERVER_CPU}, wrk + upstream on CPU {LOAD_CPU} "
            f"(direct: the upstream is the measured server, on CPU {SERVER_CPU})"
            if pin
            else "none"
        ),
    }


# The gateway's share of the bare aiohttp passthrough (the Python floor) to aim for.
BAR_FLOOR = 0.45
FLOOR = "passthrough[bare]"


def floor_share(
    args: Any, by: dict[Any, Any], gateways: list[str], width: int, ratios: dict[str, Any]
) -> None:
    """Each gateway's throughput as a share of the floor's at the same connection count."""
    if not any(key[0] == FLOOR for key in by):
        return
    print()
    print(f"Share of the floor ({FLOOR}: raw ASGI over one aiohttp session; bar ≥ {BAR_FLOOR})")
    print(f"  {'gateway':<{width}} {'conns':>5} {'gw req/s':>9} {'floor':>9} {'share':>6}")
    for target in gateways:
        rows = []
        for c in args.connections:
            gw, floor = by.get((target, c)), by.get((FLOOR, c))
            if gw is None or floor is None or not floor.rps:
                continue
            share = gw.rps / floor.rps
            rows.append(
                {
                    "connections": c,
                    "gateway_rps": gw.rps,
                    "floor_rps": floor.rps,
                    "share": round(share, 3),
                    "meets_bar": share >= BAR_FLOOR,
                }
            )
            mark = "" if share >= BAR_FLOOR else "  < bar"
            print(
                f"  {target:<{width}} {c:>5} {gw.rps:>9.1f} {floor.rps:>9.1f} {share:>6.2f}{mark}"
            )
        ratios.setdefault(target, {})["floor"] = rows


# The other goals a run can check (docs/performance.md): the p50 added over the floor at one
# connection, the tail at 64 connections, and the Redis mode against the embedded one.
GOAL_ADDED_P50_MS = 0.3
GOAL_TAIL = 3.0  # p99 ≤ this × p50 at 64 connections
GOAL_REDIS_SHARE = 0.95  # gateway+redis ÷ gateway at 16 connections


def goals(by: dict[Any, Any], gateways: list[str], width: int, ratios: dict[str, Any]) -> None:
    """Each gateway against the goals its runs can show, and whether it meets each."""
    lines: list[str] = []
    for target in gateways:
        checks = []  # (key, value, what, met, goal)
        one, floor_one, busy = by.get((target, 1)), by.get((FLOOR, 1)), by.get((target, 64))
        # The embedded mode's goal: with Redis a request waits on its round trip too.
        if one is not None and floor_one is not None and "+redis" not in target:
            added = round(one.p50_ms - floor_one.p50_ms, 3)
            what = f"p50 at 1 connection {added:+.2f} ms over the floor's"
            checks.append(("added_p50_ms_over_floor_at_1", added, what,
                           added <= GOAL_ADDED_P50_MS, f"≤ +{GOAL_ADDED_P50_MS} ms"))  # fmt: skip
        if busy is not None and busy.p50_ms:
            tail = round(busy.p99_ms / busy.p50_ms, 2)
            what = f"p99 at 64 connections {tail:.2f} × its p50"
            checks.append(("p99_over_p50_at_64", tail, what, tail <= GOAL_TAIL,
                           f"≤ {GOAL_TAIL:g} ×"))  # fmt: skip
        embedded, shared = by.get((target.replace("+redis", "", 1), 16)), by.get((target, 16))
        if "+redis" in target and embedded is not None and shared is not None and embedded.rps:
            share = round(shared.rps / embedded.rps, 3)
            what = f"at 16 connections {share:.2f} of the embedded figure"
            checks.append(("redis_over_embedded_at_16", share, what,
                           share >= GOAL_REDIS_SHARE, f"≥ {GOAL_REDIS_SHARE}"))  # fmt: skip
        for key, value, what, met, goal in checks:
            ratios.setdefault(target, {}).setdefault("goals", {})[key] = value
            lines.append(f"  {target:<{width}} {what}: {'meets' if met else 'MISSES'} {goal}")
    if lines:
        print()
        print(f"Goals (the floor: {FLOOR})")
        print("\n".join(lines))


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_ms(value: float) -> str:
    return f"{value:.2f}" if value == value else "n/a"


def report(bench: Bench, facts: dict[str, Any], elapsed: float) -> dict[str, Any]:
    args = bench.args
    # Grouped by target in the order each was first measured (the baseline's runs interleave).
    order = list(dict.fromkeys(r.target for r in bench.runs))
    ordered = sorted(bench.runs, key=lambda r: order.index(r.target))
    width = max([24, *(len(t) for t in order)])
    print()
    print("=" * 78)
    print("Machine")
    cpu = facts["cpu_model"] or "cpu model unknown"
    print(f"  nproc {facts['nproc']}  ({cpu}), kernel {facts['kernel']}")
    pk = facts["packages"]
    print(
        f"  server Python {facts['server_python']}; uvloop {pk.get('uvloop') or 'ABSENT'}, "
        f"httptools {pk.get('httptools')}, uvicorn {pk.get('uvicorn')}, httpx {pk.get('httpx')}, "
        f"aiohttp {pk.get('aiohttp')}, "
        f"Django {pk.get('Django')}, sniffio {pk.get('sniffio') or 'absent'}"
    )
    print(f"  {' '.join(facts['wrk'])}; pinning: {facts['pinning']}")
    print(f"  load average at start {', '.join(f'{x:.2f}' for x in facts['loadavg_at_start'])}")
    print(
        f"  wrk: {args.duration:g} s measured after {args.warmup:g} s warm-up per run, "
        f"1 thread (2 at 64 connections), timeout {WRK_TIMEOUT}; total wall time {elapsed:.0f} s"
    )

    print()
    print("Results")
    header = (
        f"  {'target':<{width}} {'conns':>5} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'requests':>9} {'non-2xx':>8} {'sock err':>8}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    last = None
    for run in ordered:
        if last is not None and run.target != last:
            print()
        last = run.target
        print(
            f"  {run.target:<{width}} {run.connections:>5} {run.rps:>10.1f} "
            f"{fmt_ms(run.p50_ms):>8} {fmt_ms(run.p99_ms):>8} {run.requests:>9} {run.non_2xx:>8} "
            f"{sum(run.socket_errors.values()):>8}"
        )

    by = {(r.target, r.connections): r for r in ordered}
    ratios: dict[str, Any] = {}
    bar: dict[str, Any] = {}
    gateways = [t for t in order if t.startswith("gateway")]
    if gateways:
        print()
        print("Ratios (throughput; same transport, same connection count)")
        print(
            f"  {'gateway':<{width}} {'conns':>5} {'gw req/s':>9} {'pt req/s':>9} {'gw/pt':>6} "
            f"{'direct':>9} {'gw/direct':>9}"
        )
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            rows = []
            for c in args.connections:
                gw = by.get((target, c))
                if gw is None:
                    continue
                pt = by.get((f"passthrough[{transport}]", c))
                dr = by.get(("direct", c))
                row = {
                    "connections": c,
                    "gateway_rps": gw.rps,
                    "passthrough_rps": pt.rps if pt else None,
                    "direct_rps": dr.rps if dr else None,
                    "gateway_over_passthrough": round(gw.rps / pt.rps, 3)
                    if pt and pt.rps
                    else None,
                    "gateway_over_direct": round(gw.rps / dr.rps, 3) if dr and dr.rps else None,
                }
                rows.append(row)
                gw_pt, gw_dr = row["gateway_over_passthrough"], row["gateway_over_direct"]
                print(
                    f"  {target:<{width}} {c:>5} {gw.rps:>9.1f} "
                    f"{_num(pt.rps if pt else None, 1):>9} {_num(gw_pt, 2):>6} "
                    f"{_num(dr.rps if dr else None, 1):>9} {_num(gw_dr, 3):>9}"
                )
            ratios[target] = {"throughput": rows}

        floor_share(args, by, gateways, width, ratios)
        goals(by, gateways, width, ratios)

        print()
        print("Added latency at 1 connection (p50; gateway − direct, and gateway − passthrough)")
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            gw, dr, pt = (
                by.get((target, 1)),
                by.get(("direct", 1)),
                by.get((f"passthrough[{transport}]", 1)),
            )
            if gw is None:
                print(f"  {target:<{width}} (not measured at 1 connection)")
                continue
            added = round(gw.p50_ms - dr.p50_ms, 3) if dr else None
            over_pt = round(gw.p50_ms - pt.p50_ms, 3) if pt else None
            ratios[target]["added_p50_ms_at_1"] = added
            ratios[target]["added_p50_ms_over_passthrough_at_1"] = over_pt
            print(
                f"  {target:<{width}} gateway p50 {gw.p50_ms:.2f} ms; "
                + (
                    f"direct {dr.p50_ms:.2f} ms → added {added:.2f} ms; "
                    if dr
                    else "direct not measured; "
                )
                + (
                    f"passthrough {pt.p50_ms:.2f} ms → added {over_pt:.2f} ms"
                    if pt
                    else "passthrough not measured"
                )
            )

        print()
        print(
            f"The bar: ≥ {BAR_FACTOR} × LiteLLM's {LITELLM_RPS[0]}–{LITELLM_RPS[1]} req/s "
            f"on one core (i.e. ≥ {BAR_RPS:,} req/s), and ≥ {BAR_PASSTHROUGH} × passthrough"
        )
        for target in gateways:
            transport = target[target.index("[") + 1 : -1]
            runs = [by[(target, c)] for c in args.connections if (target, c) in by]
            peak = max(runs, key=lambda r: r.rps)
            per_conn = []
            for run in runs:
                pt = by.get((f"passthrough[{transport}]", run.connections))
                share = run.rps / pt.rps if pt and pt.rps else None
                per_conn.append(
                    {
                        "connections": run.connections,
                        "rps": run.rps,
                        "meets_rps_bar": run.rps >= BAR_RPS,
                        "x_litellm_92": round(run.rps / LITELLM_RPS[1], 1),
                        "passthrough_share": round(share, 3) if share is not None else None,
                        "meets_passthrough_bar": share >= BAR_PASSTHROUGH
                        if share is not None
                        else None,
                    }
                )
            bar[target] = {
                "peak_rps": peak.rps,
                "peak_connections": peak.connections,
                "meets_rps_bar_at_peak": peak.rps >= BAR_RPS,
                "per_connections": per_conn,
            }
            print(
                f"  {target:<{width}} peak {peak.rps:,.0f} req/s at c={peak.connections} = "
                f"{peak.rps / LITELLM_RPS[1]:.1f}× LiteLLM's 92 "
                f"({peak.rps / LITELLM_RPS[0]:.1f}× its 75) "
                f"→ {'MEETS' if peak.rps >= BAR_RPS else 'BELOW'} the {BAR_RPS:,} req/s bar"
            )
            for row in per_conn:
                share = row["passthrough_share"]
                print(
                    f"  {'':<{width}} c={row['connections']:<3} {row['rps']:>8,.0f} req/s "
                    f"{'≥' if row['meets_rps_bar'] else '<'} {BAR_RPS:,}; "
                    + (
                        f"{share:.2f} × passthrough "
                        f"{'≥' if share >= BAR_PASSTHROUGH else '<'} {BAR_PASSTHROUGH}"
                        if share is not None
                        else "passthrough not measured"
                    )
                )

    comparison = compare(ordered, args.connections) if bench.baseline else {}
    if bench.baseline:
        print_comparison(comparison, bench.baseline, width)
    print_counts(bench.redis_counts, width)
    tracing = tracing_cost(ordered, args.connections)
    print_tracing(tracing, bench.otel_counts, width)

    if bench.profiles:
        print()
        print_profiles(bench.profiles)

    print()
    if bench.warnings:
        print("Warnings")
        for warning in bench.warnings:
            print(f"  - {warning}")
    else:
        print("No errors: every measured response was 2xx and no socket errors.")

    return {
        "machine": facts,
        "config": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "connections": args.connections,
            "targets": args.targets,
            "transports": args.transports,
            "redis": args.redis,
            "redis_server": bench.redis_server_kind,
            "redis_cpu": args.redis_cpu,
            "redis_count_requests": args.redis_count if args.redis else None,
            "pin": not args.no_pin,
            "model": MODEL,
            "gateway_body": GATEWAY_BODY,
            "chat_body": CHAT_BODY,
            "endpoints": args.endpoints,
            "upstream_body": UPSTREAM_BODY,
            "elapsed_s": round(elapsed, 1),
        },
        "runs": [asdict(r) for r in bench.runs],
        "ratios": ratios,
        "bar": {
            "rps": BAR_RPS,
            "passthrough_share": BAR_PASSTHROUGH,
            "litellm_rps_one_core": list(LITELLM_RPS),
            "gateways": bar,
        },
        "baseline": {**bench.baseline, "comparison": comparison} if bench.baseline else None,
        "redis_counts": bench.redis_counts,
        "tracing": {"cost": tracing, "received": bench.otel_counts},
        "profiles": bench.profiles,
        "warnings": bench.warnings,
    }
