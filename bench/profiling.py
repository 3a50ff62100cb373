"""py-spy (optional): a gateway's stacks under a separate wrk load, and their top functions."""

from __future__ import annotations

import collections
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from procs import BENCH_KEY, LOAD_CPU, BenchError, Processes
from wrkrun import parse_wrk, wrk_argv

# How long past py-spy's own seconds the load runs: it starts before py-spy does and must not
# end before py-spy has.
LOAD_MARGIN_S = 4


def record_profile(
    procs: Processes,
    *,
    python: str,
    work: Path,
    target: str,
    url: str,
    body: str,
    pid: int,
    seconds: int,
    connections: int,
) -> tuple[dict[str, Any] | None, str | None]:
    """`py-spy record --gil --threads` on `pid` while wrk loads `url` with the measured runs'
    request (the bench's client key included): (the summary, None), or (None, why not). A load
    that wasn't answered 2xx every time profiles another path than the one named, so its
    profile is refused."""
    py_spy = shutil.which(
        "py-spy", path=f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if py_spy is None:
        return None, f"--py-spy: py-spy not found (install: {python} -m pip install py-spy)"
    raw = work / f"py-spy-{target}.txt"
    load = procs.start(
        f"wrk-profile-{target}",
        wrk_argv(url, connections, seconds + LOAD_MARGIN_S, latency=False),
        {**os.environ, "BENCH_BODY": body, "BENCH_KEY": BENCH_KEY},
        LOAD_CPU,
    )
    try:
        time.sleep(1.5)
        done = procs.run(
            "py-spy",
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, round(seconds))),
                "--rate",
                "200",
                # Only samples holding the GIL: what the one busy core spends its time on
                # (threads parked in a pool or in epoll don't count).
                "--gil",
                "--threads",
                "--format",
                "raw",
                "--output",
                str(raw),
            ],
            os.environ.copy(),
            LOAD_CPU,
            timeout=seconds + 30,
        )
        load.wait(timeout=seconds + LOAD_MARGIN_S + 30)
    finally:
        procs.stop(load)
    if done.returncode != 0 or not raw.exists():
        return None, f"py-spy failed on {target}: {(done.stderr or done.stdout)[-300:]}"
    refused = _load_refused(Path(load.bench_log).read_text(errors="replace"))
    if refused:
        return None, f"py-spy on {target}: its load {refused}; no profile of that"
    summary = summarize_profile(raw.read_text(errors="replace"))
    summary["connections"] = connections
    summary["seconds"] = seconds
    return summary, None


def _load_refused(output: str) -> str:
    """What was wrong with the profile's load (wrk's output), or "" if every answer was 2xx."""
    try:
        parsed = parse_wrk(output)
    except BenchError:
        return f"printed no summary: {output[-300:]}"
    if parsed["non_2xx"] or any(parsed["socket_errors"].values()):
        return (
            f"had {parsed['non_2xx']} non-2xx answers and socket errors "
            f"{parsed['socket_errors']} of {parsed['requests']}"
        )
    return ""


_PROFILE_ROOTS = frozenset(
    {"Runner.run (asyncio/runners.py)", "_worker (concurrent/futures/thread.py)"}
)


def summarize_profile(collapsed: str, top: int = 10) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        for frame in frames:
            if frame.startswith("thread "):
                threads[frame] += n
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        # Inclusive shares below the event loop / thread pool: the frames above them (uvicorn's
        # start-up, Thread._bootstrap) are in nearly every sample and say nothing.
        roots = [i for i, frame in enumerate(frames) if frame in _PROFILE_ROOTS]
        for frame in set(frames[roots[-1] + 1 :] if roots else frames):
            inclusive[frame] += n

    def rows(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": fn, "samples": n, "pct": round(100 * n / total, 1)}
            for fn, n in counter.most_common(top)
        ]

    main_thread = threads.most_common(1)[0][1] if threads else total
    return {
        "samples": total,
        "threads_seen": len(threads),
        "main_thread_pct": round(100 * main_thread / total, 1) if total else None,
        "self": rows(own),
        "inclusive": rows(inclusive),
    }


def print_profiles(profiles: dict[str, Any]) -> None:
    for target, prof in profiles.items():
        print(
            f"py-spy on {target}: {prof['seconds']} s at c={prof['connections']}, "
            f"{prof['samples']} samples holding the GIL, {prof['threads_seen']} threads seen, "
            f"{prof['main_thread_pct']}% on the busiest (Python frames only: time inside C "
            f"code such as uvloop is charged to the Python frame that called it)"
        )
        print("  top self:")
        for row in prof["self"]:
            print(f"    {row['pct']:5.1f}%  {row['function']}")
        print("  top inclusive (below the event loop and the thread pool):")
        for row in prof["inclusive"]:
            print(f"    {row['pct']:5.1f}%  {row['function']}")
