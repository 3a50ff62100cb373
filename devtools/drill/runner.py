"""One drill run: the target (the embedded gateway, or a running one by URL), a check that the
primary answers before anything is broken, the load with the scenario's timeline, the ledger
and the alerts read back, and the report."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import httpx

from devtools.drill import collect as ledger_collect
from devtools.drill import load, report, report_text
from devtools.drill.embedded import EmbeddedSite
from devtools.drill.scenarios import (
    PRIMARY,
    SCENARIOS,
    Action,
    Scenario,
    fault_window,
    timeline,
)

# Embedded mode only: the breaker's cooldown and the failover alert's flap window shortened
# from the policy's 60 s, so that a recovery and the alert fit in a run of half a minute.
# `--policy cooldown_s=60 --policy flap_window_s=60` puts them back.
EMBEDDED_POLICY: dict[str, Any] = {"cooldown_s": 5, "flap_window_s": 10}
CONTROL_TIMEOUT_S = 5.0
# The exit status of a drill stopped by SIGTERM (128 + the signal's number, as a shell says).
TERMINATED_EXIT = 128 + signal.SIGTERM


class DrillError(RuntimeError):
    """The drill could not be run as asked (not: the drill ran and failed its expectations)."""


@dataclass
class Options:
    scenario: str
    urls: list[str] = field(default_factory=list)  # empty: embedded mode
    fake_urls: list[str] = field(default_factory=list)  # the primary's, then the secondary's
    key: str = ""
    rate: float | None = None
    duration_s: float | None = None
    fault_at_s: float | None = None
    fault_for_s: float | None = None
    concurrency: int = 512
    processes: int = 1
    redis: bool = False
    policy: dict[str, Any] = field(default_factory=dict)
    ledger_wait_s: float = 15.0
    keep: bool = False


@dataclass
class Outcome:
    report: report.Report
    text: str
    scenario: Scenario
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.name, "notes": self.notes, **self.report.to_dict()}


def execute(options: Options, say: Callable[[str], None] = lambda _: None) -> Outcome:
    """Run the drill. While it runs, SIGTERM ends it as an exception would, so the embedded
    gateway's processes (each in a session of its own, out of reach of the signal sent to the
    drill's group) are stopped on the way out."""
    with sigterm_as_exit():
        return _execute(options, say)


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) within the block (Python's default would end the process
    without running `finally`); the previous handler is put back after. In the main thread only,
    where signal handlers live; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(TERMINATED_EXIT)

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _execute(options: Options, say: Callable[[str], None]) -> Outcome:
    scenario = SCENARIOS.get(options.scenario)
    if scenario is None:
        raise DrillError(f"no scenario {options.scenario!r}; one of {', '.join(SCENARIOS)}")
    rate = options.rate or scenario.rate
    duration = options.duration_s or scenario.duration_s
    fault_at = scenario.fault_at_s if options.fault_at_s is None else options.fault_at_s
    fault_for = scenario.fault_for_s if options.fault_for_s is None else options.fault_for_s
    actions = timeline(scenario, fault_at=fault_at, fault_for=fault_for, duration=duration)
    notes: list[str] = []
    site: EmbeddedSite | None = None
    if options.urls:
        if scenario.redis:
            raise DrillError("redis_down stops the drill's own Redis: embedded mode only")
        if len(options.fake_urls) < len({a.target for a in actions if a.target != "redis"}):
            raise DrillError("--fake-url: the primary's fake (and the secondary's) are needed")
        urls, key = options.urls, options.key
        fake_urls = dict(zip(("primary", "secondary"), options.fake_urls, strict=False))
        roles: dict[str, str] = {}
        if scenario.policy or scenario.provider_changes:
            notes.append(
                "a running gateway keeps its own settings; this scenario assumes "
                f"policy {scenario.policy} and providers {scenario.provider_changes}"
            )
    else:
        policy = {**EMBEDDED_POLICY, **scenario.policy, **options.policy}
        notes.append(f"embedded gateway, policy changes: {policy}")
        say(f"starting the embedded gateway ({options.processes} process(es))…")
        site = EmbeddedSite(
            processes=options.processes,
            redis=options.redis or scenario.redis,
            policy=policy,
            provider_changes=scenario.provider_changes,
            keep=options.keep,
        ).start()
        urls, key, fake_urls, roles = site.urls, site.key, site.fake_urls, site.roles
        if options.keep:
            notes.append(f"kept: {site.work}")
    try:
        return _run(scenario, options, site, urls, key, fake_urls, roles, actions, notes, say,
                    rate=rate, duration=duration)  # fmt: skip
    finally:
        if site is not None:
            site.stop()


def _run(
    scenario: Scenario,
    options: Options,
    site: EmbeddedSite | None,
    urls: list[str],
    key: str,
    fake_urls: dict[str, str],
    roles: dict[str, str],
    actions: list[Action],
    notes: list[str],
    say: Callable[[str], None],
    *,
    rate: float,
    duration: float,
) -> Outcome:
    for role, url in fake_urls.items():
        _reset_fake(role, url)
    played_first: list[load.Played] = []
    if scenario.cold:
        # Broken before the first request: the gateway has no latency history of the provider.
        played_first = asyncio.run(_play_now([a for a in actions if a.at <= 0], fake_urls, site))
        actions = [a for a in actions if a.at > 0]
        if site is None:
            notes.append("a running gateway may already know the primary's latency: not cold")
    else:
        first = asyncio.run(load.ask(urls[0], key, stream=scenario.stream))
        if first.status is None:
            raise DrillError(f"the gateway at {urls[0]} did not answer: {first.error}")
        if not first.ok or first.tier != PRIMARY:
            notes.append(
                f"before the fault the first request was answered by {first.tier or '-'} "
                f"(HTTP {first.status}{', ' + first.error if first.error else ''})"
            )
    plan = load.LoadPlan(
        urls=urls,
        key=key,
        rate=rate,
        duration_s=duration,
        concurrency=options.concurrency,
        stream=scenario.stream,
        actions=actions,
    )
    since = datetime.now(UTC)
    say(f"{scenario.name}: {rate:g} requests/s for {duration:g} s…")
    collected = asyncio.run(load.run(plan, _player(fake_urls, site)))
    collected.played[:0] = played_first
    for played in collected.played:
        if played.error:
            notes.append(f"action {played.action.op} {played.action.target} failed: {played.error}")
    if collected.status_error:
        notes.append(f"breakers not read: {collected.status_error}")
    request_ids = [s.request_id for s in collected.samples if s.request_id]
    spec = {
        "request_ids": request_ids,
        "key": key,
        "since": since.isoformat(),
        "expected": len(collected.samples),
        "wait_s": options.ledger_wait_s,
        "origin": collected.started_wall,
    }
    say("reading the ledger and the alerts…")
    if site is not None:
        found = site.collect(spec)
    else:
        found = ledger_collect.collect(
            request_ids=request_ids,
            key=key,
            since=since,
            expected=len(collected.samples),
            wait_s=options.ledger_wait_s,
            origin=collected.started_wall,
        )
    played_actions = [
        Action(p.at, p.action.target, p.action.op, p.action.changes, p.action.seconds)
        for p in collected.played
    ]
    window = fault_window(played_actions, duration)
    order = collected.provider_order
    named = {"primary": order[0] if order else "", "secondary": order[1] if len(order) > 1 else ""}
    named.update(roles)
    faulted = named.get(scenario.faulted) or None
    if site is None and not found["key_known"] and found["matched"] == 0:
        # The database the drill read knows neither its key nor its requests: not the gateway's.
        notes.append(
            "ledger, alerts and timeouts not checked: the database this drill reads "
            "(its DATABASE_URL) knows neither its client key nor any of its requests; run it "
            "with the gateway's DATABASE_URL"
        )
        found = {**found, "alerts": [], "calls": [], "cooldown_s": None, "timeouts": {}}
        ledger: report.Ledger | None = None
    else:
        ledger = report.Ledger(
            matched=found["matched"],
            client_rows=found["client_rows"],
            waited_s=found["waited_s"],
            ids_missing=found["ids_missing"],
            reasons=found["reasons"],
            attempts=found["attempts"],
        )
    inputs = report.Inputs(
        samples=collected.samples,
        readings=collected.readings,
        faulted_provider=faulted,
        faulted_tier=scenario.faulted if scenario.faulted in ("primary", "secondary") else None,
        next_tiers=scenario.next_tiers,
        fault_at=window.start,
        clear_at=window.last_clear,
        first_clear_at=window.first_clear,
        ledger=ledger,
        alerts=found["alerts"],
        skipped=collected.skipped,
        expect=scenario.expect,
        calls=[report.LedgerCall(*call) for call in found["calls"]],
        cooldown_s=found["cooldown_s"],
        faulted_timeout_s=found["timeouts"].get(faulted) if faulted else None,
    )
    built = report.build(inputs)
    text = report_text.text(
        built, scenario=scenario.name, description=scenario.description, notes=notes
    )
    return Outcome(built, text, scenario, notes)


def _reset_fake(role: str, url: str) -> None:
    """Clear any fault left on a fake provider; a fake that can't be reached or won't reset
    means the drill can't be run."""
    try:
        response = httpx.post(f"{url}/_control/reset", timeout=CONTROL_TIMEOUT_S, trust_env=False)
    except httpx.HTTPError as exc:
        raise DrillError(f"the {role}'s fake provider at {url} did not answer: {exc!r}") from None
    if not response.is_success:
        raise DrillError(
            f"the {role}'s fake provider at {url} answered its reset with HTTP "
            f"{response.status_code}: is it the project's fake provider?"
        )


async def _play_now(
    actions: list[Action], fake_urls: dict[str, str], site: EmbeddedSite | None
) -> list[load.Played]:
    """The actions due at the start, played before the load begins (at 0 s)."""
    play = _player(fake_urls, site)
    played = []
    for action in actions:
        try:
            await play(action)
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            played.append(load.Played(0.0, action, f"{type(exc).__name__}: {exc}"))
        else:
            played.append(load.Played(0.0, action))
    return played


def _player(fake_urls: dict[str, str], site: EmbeddedSite | None) -> load.ActionHook:
    async def play(action: Action) -> None:
        if action.target == "redis":
            if site is None or site.redis is None:
                raise RuntimeError("no Redis of the drill's own to stop")
            redis = site.redis
            await asyncio.to_thread(redis.kill if action.op == "stop" else redis.start)
            return
        base = fake_urls[action.target]
        async with httpx.AsyncClient(timeout=CONTROL_TIMEOUT_S, trust_env=False) as client:
            if action.op == "fault":
                response = await client.post(f"{base}/_control/fault", json=action.changes)
            elif action.op == "clear":
                response = await client.post(f"{base}/_control/reset")
            else:  # refuse
                for_ms = max(1, round(action.seconds * 1000))
                response = await client.post(f"{base}/_control/refuse", json={"for_ms": for_ms})
            response.raise_for_status()

    return play
