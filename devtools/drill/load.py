"""The drill's load and what it collects: an open-loop stream of requests at a fixed rate (each
sent at its time whatever the others are doing, up to a bound on those in flight), the
breakers read from GET /api/v1/status, and the timeline's actions played at their times.

Everything is collected as plain samples, timed in seconds from the start of the run; the
report does the arithmetic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from devtools.drill.scenarios import Action

# A request that has not finished after this long is a client error (a transport timeout):
# longer than the policy's default request deadline (30 s) and any provider's timeout.
REQUEST_TIMEOUT_S = 45.0
WARM_UP_TIMEOUT_S = 30.0
STATUS_EVERY_S = 0.25
PROMPT = "Say hello."


@dataclass(frozen=True)
class Sample:
    """One request: when it was sent and how long it took (s from the start), what came back."""

    sent_at: float
    latency_s: float
    status: int | None  # None: no HTTP answer at all (see error)
    tier: str = ""
    provider: str = ""
    request_id: str = ""
    error: str = ""  # a transport error, or a stream that broke
    broken_stream: bool = False  # a streamed answer that ended with an error event

    @property
    def done_at(self) -> float:
        return self.sent_at + self.latency_s

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300 and not self.error


@dataclass(frozen=True)
class Reading:
    """The breakers at `at`: provider name -> state ("closed", "open", "half_open", ...)."""

    at: float
    breakers: dict[str, str]


@dataclass(frozen=True)
class Played:
    """An action of the timeline as it really happened (its time, and its failure if any)."""

    at: float
    action: Action
    error: str = ""


@dataclass
class Collected:
    samples: list[Sample] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    played: list[Played] = field(default_factory=list)
    skipped: int = 0  # requests not sent: the bound on requests in flight was reached
    status_error: str = ""  # why the breakers could not be read, if they couldn't
    provider_order: list[str] = field(default_factory=list)  # by priority, from the status
    started_wall: float = 0.0  # the run's start on the wall clock (epoch s): the ledger's times


ActionHook = Callable[[Action], Awaitable[None]]


@dataclass(frozen=True)
class LoadPlan:
    urls: Sequence[str]  # the gateway's base URLs: requests go round-robin over them
    key: str
    rate: float
    duration_s: float
    concurrency: int
    stream: bool
    actions: Sequence[Action]


async def run(plan: LoadPlan, play: ActionHook) -> Collected:
    """Send the load, read the breakers and play the actions; return once every request has
    finished (or timed out) and the last action has been played."""
    collected = Collected()
    headers = {"Authorization": f"Bearer {plan.key}"}
    limits = httpx.Limits(max_connections=plan.concurrency, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        headers=headers, timeout=REQUEST_TIMEOUT_S, limits=limits, trust_env=False
    ) as client:
        start = time.monotonic()
        collected.started_wall = time.time()

        def now() -> float:
            return time.monotonic() - start

        stop_status = asyncio.Event()
        watcher = asyncio.create_task(
            _watch_status(client, plan.urls[0], now, collected, stop_status)
        )
        timeline = asyncio.create_task(_play(plan.actions, play, now, collected))
        await _send_all(client, plan, now, collected)
        await timeline
        stop_status.set()
        await watcher
    collected.samples.sort(key=lambda sample: sample.sent_at)
    return collected


async def ask(url: str, key: str, *, stream: bool) -> Sample:
    """One request exactly as the load sends it (streamed or not), timed from now: the check
    that the primary answers before anything is broken."""
    collected = Collected()
    start = time.monotonic()
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=WARM_UP_TIMEOUT_S, trust_env=False
    ) as client:
        await _one(client, url, stream, lambda: time.monotonic() - start, collected)
    return collected.samples[0]


async def _send_all(
    client: httpx.AsyncClient, plan: LoadPlan, now: Callable[[], float], collected: Collected
) -> None:
    total = int(plan.rate * plan.duration_s)
    urls = itertools.cycle(plan.urls)
    in_flight: set[asyncio.Task[None]] = set()
    for index in range(total):
        delay = index / plan.rate - now()
        if delay > 0:
            await asyncio.sleep(delay)
        url = next(urls)
        if len(in_flight) >= plan.concurrency:
            collected.skipped += 1
            continue
        task = asyncio.create_task(_one(client, url, plan.stream, now, collected))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)


async def _one(
    client: httpx.AsyncClient,
    base: str,
    stream: bool,
    now: Callable[[], float],
    collected: Collected,
) -> None:
    sent = now()
    try:
        if stream:
            sample = await _streamed(client, base, sent, now)
        else:
            response = await client.post(f"{base}/api/v1/complete", json={"prompt": PROMPT})
            sample = _answered(response, sent, now())
    except httpx.HTTPError as exc:
        sample = Sample(sent, now() - sent, None, error=f"{type(exc).__name__}: {exc}"[:200])
    collected.samples.append(sample)


def _answered(response: httpx.Response, sent: float, done: float) -> Sample:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    return Sample(
        sent,
        done - sent,
        response.status_code,
        tier=str(body.get("tier") or response.headers.get("x-failover-tier", "")),
        provider=str(body.get("provider") or ""),
        request_id=str(body.get("request_id") or response.headers.get("x-request-id", "")),
    )


async def _streamed(
    client: httpx.AsyncClient, base: str, sent: float, now: Callable[[], float]
) -> Sample:
    body = {"model": "auto", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        events = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    headers = response.headers
    done = events[-1:] == ["data: [DONE]"]
    broken = any(_is_error_event(event) for event in events)
    error = ""
    if response.status_code == 200 and not done:
        error = "stream broken mid-answer" if broken else "stream ended without [DONE]"
    return Sample(
        sent,
        now() - sent,
        response.status_code,
        tier=headers.get("x-failover-tier", ""),
        provider=headers.get("x-failover-provider", ""),
        request_id=headers.get("x-request-id", ""),
        error=error,
        broken_stream=broken,
    )


def _is_error_event(event: str) -> bool:
    try:
        data = json.loads(event.removeprefix("data: "))
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


async def _play(
    actions: Sequence[Action], play: ActionHook, now: Callable[[], float], collected: Collected
) -> None:
    for action in actions:
        delay = action.at - now()
        if delay > 0:
            await asyncio.sleep(delay)
        at = now()
        try:
            await play(action)
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            collected.played.append(Played(at, action, f"{type(exc).__name__}: {exc}"))
        else:
            collected.played.append(Played(at, action))


async def _watch_status(
    client: httpx.AsyncClient,
    base: str,
    now: Callable[[], float],
    collected: Collected,
    stop: asyncio.Event,
) -> None:
    """Read the breakers every STATUS_EVERY_S until told to stop (or the status is refused)."""
    while not stop.is_set():
        try:
            response = await client.get(f"{base}/api/v1/status", timeout=2.0)
            if response.status_code in (401, 403):
                collected.status_error = f"GET /api/v1/status answered {response.status_code}"
                return
            if response.status_code == 200:
                reading = _reading(response.json(), now())
                collected.readings.append(reading)
                if not collected.provider_order:
                    collected.provider_order = _by_priority(response.json())
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass  # a missed reading is a gap in the breakers' timeline, nothing more
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), STATUS_EVERY_S)


def _reading(status: dict[str, Any], at: float) -> Reading:
    return Reading(at, {p["name"]: str(p["breaker"]["state"]) for p in status.get("providers", [])})


def _by_priority(status: dict[str, Any]) -> list[str]:
    providers = [p for p in status.get("providers", []) if p.get("priority") is not None]
    return [p["name"] for p in sorted(providers, key=lambda p: p["priority"])]
