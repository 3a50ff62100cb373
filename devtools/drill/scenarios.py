"""The drills: what each one breaks, when it mends it, and what the run must show.

A scenario is data. `timeline` turns it and the run's times into the actions the load's
timeline plays (a fault set on a fake provider, its reset, its listener closed, Redis stopped or
started), so the schedule is tested without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PRIMARY = "primary"
SECONDARY = "secondary"
FALLBACK_TIERS = ("cache", "static", "degraded")


@dataclass(frozen=True)
class Action:
    """At `at` s into the run: `op` on `target` (a provider role, or "redis").

    ops: "fault" (POST /_control/fault `changes`), "clear" (POST /_control/reset), "refuse"
    (POST /_control/refuse for `seconds`), "stop" and "start" (Redis)."""

    at: float
    target: str
    op: str
    changes: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def breaks(self) -> bool:
        return self.op in ("fault", "refuse", "stop")


@dataclass(frozen=True)
class Expect:
    """What the run must show; a broken expectation makes the command exit non-zero."""

    max_client_errors: int = 0
    # True: the faulted provider's breaker must open; False: it must never open; None: either.
    breaker_opens: bool | None = True
    # A stream cut after its first text can't be repaired (the answer has begun): such broken
    # streams are reported, and allowed when this is True.
    broken_streams_allowed: bool = False
    ledger_exact: bool = True
    # The targets for a hung (or refusing) primary: at least this share of the requests
    # answered within 2 s (%), traffic on the next tier within this many seconds of the fault,
    # and no request sent after the fault waiting out the faulted provider's whole timeout.
    min_within_2s_pct: float | None = None
    next_tier_within_s: float | None = None
    no_full_timeout: bool = False
    # At most this many requests waiting more than 2 s (None: any number).
    max_waits_over_2s: int | None = None
    # The faulted tier answering a client within this many seconds of the run's start (a model
    # loading when the run starts), and a provider's real answer (primary or secondary) within
    # this many seconds of the fault clearing (after a total outage).
    faulted_serves_within_s: float | None = None
    real_answer_within_s: float | None = None


# The targets for the black-holed primary ("the 3 a.m. scenario").
FAILOVER_TARGETS = Expect(min_within_2s_pct=95.0, next_tier_within_s=2.0, no_full_timeout=True)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    # role -> the fault fields it gets when the fault starts (the refused scenario closes the
    # listener instead: `refuse`).
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse: tuple[str, ...] = ()
    # Who is broken (its breaker is watched, its return is the recovery) and which tiers count
    # as "the next tier"; None: no tier is meant to change.
    faulted: str = PRIMARY
    next_tiers: tuple[str, ...] | None = (SECONDARY,)
    # Flapping: the fault switched off and on every `flap_s` seconds within its window.
    flap_s: float | None = None
    stream: bool = False
    redis: bool = False  # production mode: stop and restart Redis instead of a fake's fault
    # The fault is in place before the first request (no warm-up request): the gateway meets
    # the broken provider with no latency history of it.
    cold: bool = False
    # Settings an operator of such a set-up would have: applied in embedded mode only.
    policy: dict[str, Any] = field(default_factory=dict)
    provider_changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Defaults of the run's times (the options override them).
    rate: float = 20.0
    duration_s: float = 30.0
    fault_at_s: float = 5.0
    fault_for_s: float | None = 12.0  # None: to the end of the run
    expect: Expect = field(default_factory=Expect)


SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            "refused",
            "The primary's port refuses connections (its listener closed, open connections "
            "dropped), then listens again.",
            refuse=(PRIMARY,),
            expect=FAILOVER_TARGETS,
        ),
        Scenario(
            "blackhole",
            "The primary accepts and never answers (hang) until the fault clears: within 2 s "
            "of the fault traffic is on the secondary, 95 % of the requests are answered "
            "within 2 s and none waits out the primary's timeout.",
            faults={PRIMARY: {"mode": "hang"}},
            expect=FAILOVER_TARGETS,
        ),
        Scenario(
            "slow",
            "The primary answers after 9 s, past the policy's slow-call threshold (8 s by "
            "default) and within its 20 s timeout.",
            faults={PRIMARY: {"mode": "slow", "delay_ms": 9000}},
            duration_s=40.0,
            fault_for_s=20.0,
            # A call still waiting past its stuck threshold moves traffic on as a hang does.
            expect=Expect(next_tier_within_s=2.0),
        ),
        Scenario(
            "flapping",
            "The primary fails (500) for 10 s, answers for 10 s, fails again, and so on.",
            faults={PRIMARY: {"mode": "error", "status": 500}},
            flap_s=10.0,
            duration_s=60.0,
            fault_for_s=40.0,
        ),
        Scenario(
            "rate_limit_storm",
            "The primary answers every call with 429 and Retry-After: 10.",
            faults={PRIMARY: {"mode": "rate_limit", "retry_after": "10"}},
        ),
        Scenario(
            "secondary_unauthorized",
            "The secondary rejects its key (401) while the primary refuses connections: the "
            "upstream's 401 must never reach a client, and traffic goes past both to the "
            "cache, static or degraded tier.",
            faults={SECONDARY: {"mode": "unauthorized"}},
            refuse=(PRIMARY,),
            next_tiers=FALLBACK_TIERS,
        ),
        Scenario(
            "all_down",
            "Every provider fails (503): the answers come from the cache, the static tier or "
            "the degradation message.",
            faults={
                PRIMARY: {"mode": "error", "status": 503},
                SECONDARY: {"mode": "error", "status": 503},
            },
            next_tiers=FALLBACK_TIERS,
        ),
        Scenario(
            "stream_cut",
            "Streamed requests (POST /v1/chat/completions, stream: true); the primary drops "
            "the connection after 300 bytes of its answer (a few tokens in).",
            faults={PRIMARY: {"mode": "cut_stream", "cut_after_bytes": 300, "chunk_delay_ms": 20}},
            stream=True,
            expect=Expect(broken_streams_allowed=True),
        ),
        Scenario(
            "redis_down",
            "Production mode (Redis): Redis is killed mid-run and started again; every process "
            "routes on its local state meanwhile.",
            redis=True,
            faulted="redis",
            next_tiers=None,
            expect=Expect(breaker_opens=None),
        ),
        Scenario(
            "cold_blackhole",
            "The primary hangs from the very first request (a gateway started beside a wedged "
            "Ollama), so no call to it can be judged by a latency history: each waits at most "
            "the first-byte bound (1.5 s) before the request goes on to the secondary, the call "
            "running on. At least 95 % answered within 2 s, none waiting out the primary's "
            "timeout, no client error.",
            faults={PRIMARY: {"mode": "hang"}},
            cold=True,
            rate=50.0,
            duration_s=20.0,
            fault_at_s=0.0,
            fault_for_s=None,
            expect=Expect(breaker_opens=None, min_within_2s_pct=95.0, no_full_timeout=True),
        ),
        Scenario(
            "cold_load",
            "The primary's model is not in memory when the run starts (Ollama restarted): its "
            "first call takes 8 s (a 7 s load, then 1 s), each one after it 1 s. The calls "
            "waiting on the load go on to the secondary at the first-byte bound and run on; "
            "the primary's breaker never opens, and it answers clients again within 10 s of "
            "the start.",
            faults={PRIMARY: {"mode": "loading", "load_ms": 7000, "delay_ms": 1000}},
            cold=True,
            next_tiers=None,
            rate=10.0,
            duration_s=20.0,
            fault_at_s=0.0,
            fault_for_s=None,
            expect=Expect(breaker_opens=False, faulted_serves_within_s=10.0),
        ),
        Scenario(
            "total_outage",
            "Every provider answers 500 to everything (its health checks too) for 30 s under 5 "
            "requests a second, then recovers: the stand-ins answer meanwhile with no request "
            "waiting on a dead provider, and a provider's real answer comes within 5 s of the "
            "recovery, though every breaker's cooldown has grown past that (one trickle call "
            "at a time per process finds the first provider back; each breaker is probed the "
            "moment its cooldown ends).",
            faults={
                PRIMARY: {"mode": "error", "status": 500, "scope": "all"},
                SECONDARY: {"mode": "error", "status": 500, "scope": "all"},
            },
            next_tiers=FALLBACK_TIERS,
            rate=5.0,
            duration_s=45.0,
            fault_at_s=5.0,
            fault_for_s=30.0,
            expect=Expect(max_waits_over_2s=0, real_answer_within_s=5.0),
        ),
        Scenario(
            "slow_normal",
            "No false trip: a primary whose answers normally take 4-8 s (slow, 6 s +/- 2 s) "
            "for the whole run must never open its breaker. The policy's defaults would trip "
            "it (p95 limit 5 s), so the drill sets what an operator of such a model sets: p95 "
            "limit 10 s, slow call 12 s, and room for 400 calls in flight on the primary (50 "
            "a second for 6 s). The stuck rule keeps its defaults: 3 × the p99, at most 10 s.",
            faults={PRIMARY: {"mode": "slow", "delay_ms": 6000, "jitter_ms": 2000}},
            next_tiers=None,
            policy={"p95_latency_s": 10.0, "slow_call_s": 12.0},
            provider_changes={PRIMARY: {"max_in_flight": 400}},
            rate=50.0,
            duration_s=60.0,
            fault_at_s=0.0,
            fault_for_s=None,
            expect=Expect(breaker_opens=False),
        ),
    )
}


def timeline(
    scenario: Scenario, *, fault_at: float, fault_for: float | None, duration: float
) -> list[Action]:
    """The actions of one run, in time order: the fault from `fault_at` for `fault_for` s
    (to the end of the run when None), flapping within that window when the scenario flaps."""
    end = duration if fault_for is None else min(duration, fault_at + fault_for)
    windows = [(fault_at, end)]
    if scenario.flap_s:
        windows, start = [], fault_at
        while start < end:
            windows.append((start, min(end, start + scenario.flap_s)))
            start += 2 * scenario.flap_s
    actions: list[Action] = []
    for start, stop in windows:
        clears = stop < duration
        for role, changes in scenario.faults.items():
            actions.append(Action(start, role, "fault", dict(changes)))
            if clears:
                actions.append(Action(stop, role, "clear"))
        for role in scenario.refuse:
            actions.append(Action(start, role, "refuse", seconds=stop - start))
        if scenario.redis:
            actions.append(Action(start, "redis", "stop"))
            if clears:
                actions.append(Action(stop, "redis", "start"))
    return sorted(actions, key=lambda action: action.at)


@dataclass(frozen=True)
class Window:
    """When the first fault started, when it first cleared (a flapping fault's first "up"),
    and when the last one cleared; None: it didn't (within the run)."""

    start: float | None
    first_clear: float | None
    last_clear: float | None


def fault_window(actions: list[Action], duration: float) -> Window:
    starts = [a.at for a in actions if a.breaks]
    if not starts:
        return Window(None, None, None)
    ends = sorted(
        [a.at for a in actions if not a.breaks]
        + [a.at + a.seconds for a in actions if a.op == "refuse"]
    )
    ends = [end for end in ends if end < duration]
    return Window(min(starts), ends[0] if ends else None, ends[-1] if ends else None)
