"""The cascade: for one request, who answers.

Kill switch → the answer cache when the policy saves cost with it → providers (by priority,
weighted or hedged, filtered by what the request allows, the breaker and the budgets), each
given min(its timeout, the time left) and judged by the error table → the cached answer → the
static answer → the degradation message. DESIGN.md, "A request's walk".

A streamed request is routed the same way up to its first token: a provider that fails before
then (or doesn't start within the policy's time to first token) is passed over like any other.
From the first token on the answer belongs to that provider; `finish_stream` settles its
bookkeeping once the stream has ended, whole or broken.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from billing.budgets import budget_gate

from . import breaker
from .adapters.base import Completion, CompletionRequest, CompletionStream, estimate_tokens
from .adapters.errors import ERROR_TABLE, ErrorClass, ErrorRule, ProviderError
from .breaker import Admission, BreakerEvent, BreakerState
from .cache import CachedAnswer, answer_key, cache_read, cache_write
from .gateway import Gateway
from .health import health_skip
from .snapshot import BudgetConfig, PolicyConfig, ProviderConfig, Snapshot
from .state import Sample, SpendIncrement, Windows, spend_key

logger = logging.getLogger(__name__)

# An attempt with less time than this left isn't worth starting.
MIN_ATTEMPT_S = 0.05

STATIC_NOTICE = (
    "The assistant is unavailable right now; this is a prepared answer to a common question."
)
CACHED_NOTICE = (
    "The assistant is unavailable right now; this answer was saved earlier and may be out of date."
)
DEGRADED_NOTICE = "The assistant is unavailable right now."


@dataclass(frozen=True, slots=True)
class RouteRequest:
    completion: CompletionRequest
    request_id: str
    priority: str = "normal"
    task: str = ""
    allow_cloud: bool = True
    client: str = ""
    stream: bool = False
    use_cache: bool = True
    prefer: str = ""  # a provider asked for by name: tried first, then the cascade
    sticky_key: str = ""  # the user or session the weighted strategy keeps on one provider


@dataclass(slots=True)
class Attempt:
    provider: str
    outcome: str  # ok / error / skipped / cancelled
    error_class: str = ""
    latency_ms: int = 0
    status: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"provider": self.provider, "outcome": self.outcome}
        if self.error_class:
            row["error_class"] = self.error_class
        if self.outcome != "skipped":
            row["latency_ms"] = self.latency_ms
        if self.status is not None:
            row["status"] = self.status
        if self.detail:
            row["detail"] = self.detail
        return row


@dataclass(slots=True)
class RouteResult:
    text: str
    tier: str  # primary / secondary / cache / static / degraded / none
    status: int = 200
    provider: str = ""
    is_fallback: bool = False
    degradation_notice: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal("0")
    reason: str = ""
    static_answer_id: int | None = None
    cache_hit: bool = False
    cached_age_s: int | None = None
    finish_reason: str = "stop"
    error: dict[str, Any] | None = None
    store_prompt: bool = False  # the policy keeps prompts in the ledger
    # A streamed answer whose first token has arrived: the rest is read by the view, then
    # `finish_stream` settles it. `interrupted` is set when it broke before its end.
    stream: CompletionStream | None = None
    interrupted: bool = False
    attempts: list[Attempt] = field(default_factory=list)
    events: list[BreakerEvent] = field(default_factory=list)
    _pending: _Pending | None = None

    @property
    def outcome(self) -> str:
        if self.error is not None or self.interrupted:
            return "rejected" if self.status < 500 and not self.interrupted else "failed"
        return "fallback" if self.is_fallback else "ok"


@dataclass(slots=True)
class _Walk:
    """One request's route: what every attempt needs to know."""

    request: RouteRequest
    snapshot: Snapshot
    gateway: Gateway
    deadline: float
    cache_key: str
    events: list[BreakerEvent]

    @property
    def policy(self) -> PolicyConfig:
        return self.snapshot.policy


@dataclass(slots=True)
class _Ticket:
    """An admitted call: what its settling needs."""

    provider: ProviderConfig
    state: BreakerState
    was_probe: bool
    budgets: list[BudgetConfig]
    keys: dict[int, tuple[str, int]]
    started: float


@dataclass(slots=True)
class _AttemptResult:
    attempt: Attempt
    completion: Completion | None = None
    stream: CompletionStream | None = None
    error: ProviderError | None = None
    cost: Decimal = Decimal("0")
    ticket: _Ticket | None = None  # a stream's, until it is settled

    @property
    def answered(self) -> bool:
        return self.completion is not None or self.stream is not None


@dataclass(slots=True)
class _Pending:
    walk: _Walk
    ticket: _Ticket
    attempt: Attempt


async def route(request: RouteRequest, gateway: Gateway) -> RouteResult:
    snapshot = await gateway.snapshots.current()
    result = await _route(request, snapshot, gateway)
    result.store_prompt = snapshot.policy.store_prompts
    return result


async def _route(request: RouteRequest, snapshot: Snapshot, gateway: Gateway) -> RouteResult:
    policy = snapshot.policy
    use_cache = request.use_cache and policy.cache_mode != "off"
    walk = _Walk(
        request=request,
        snapshot=snapshot,
        gateway=gateway,
        deadline=gateway.clock.mono() + policy.request_deadline_s,
        cache_key=answer_key(request.completion) if use_cache else "",
        events=[],
    )
    attempts: list[Attempt] = []

    if policy.kill_switch == "static_only":
        return await _fallback(walk, attempts, "kill_switch_static_only", cache=False)
    candidates: Sequence[ProviderConfig] = snapshot.providers
    forced_reason = ""
    if policy.kill_switch == "force_provider":
        forced = snapshot.provider(policy.kill_switch_provider)
        candidates = (forced,) if forced is not None else ()
        forced_reason = "kill_switch_forced"
    elif (
        walk.cache_key
        and policy.cache_mode == "cost_saver"
        # A provider asked for by name, or a task that takes no fallback, wants a fresh answer.
        and not request.prefer
        and request.task not in policy.no_fallback_tasks
    ):
        hit = await cache_read(gateway.store, walk.cache_key)
        if hit is not None:
            return _cached(walk, hit, attempts, "cache_cost_saver", fallback=False)
        candidates = _ordered(candidates, request, policy)
    else:
        candidates = _ordered(candidates, request, policy)

    if policy.strategy == "hedged":
        answered = await _hedged(walk, candidates, attempts)
    else:
        answered = await _in_turn(walk, candidates, attempts)
    if isinstance(answered, RouteResult):
        return answered
    if answered is not None:
        return _answered(walk, answered, attempts, forced_reason)

    reason = forced_reason or _reason_from(snapshot, attempts) or "no_provider"
    if request.task and request.task in policy.no_fallback_tasks:
        return RouteResult(
            text="",
            tier="none",
            status=503,
            reason=reason,
            error={
                "code": "providers_unavailable",
                "message": "No provider could answer, and this task takes no fallback answer.",
            },
            attempts=attempts,
            events=walk.events,
        )
    return await _fallback(walk, attempts, reason, cache=bool(walk.cache_key))


def _ordered(
    providers: Sequence[ProviderConfig], request: RouteRequest, policy: PolicyConfig
) -> Sequence[ProviderConfig]:
    """The providers in the order this request tries them: the one asked for by name first,
    then by priority; with the weighted strategy, each priority's providers start with one
    drawn by weight (the same one for the same user) and go on by weight."""
    ordered = list(providers)
    if policy.strategy == "weighted":
        ordered = []
        group: list[ProviderConfig] = []
        for provider in (*providers, None):
            if group and (provider is None or provider.priority != group[0].priority):
                ordered += _weighted(group, request.sticky_key)
                group = []
            if provider is not None:
                group.append(provider)
    if request.prefer:
        preferred = [p for p in ordered if p.name == request.prefer]
        ordered = preferred + [p for p in ordered if p.name != request.prefer]
    return ordered


def _weighted(group: list[ProviderConfig], sticky_key: str) -> list[ProviderConfig]:
    if len(group) == 1:
        return group
    total = sum(p.weight for p in group)
    if sticky_key:
        digest = hashlib.sha256(sticky_key.encode()).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64 * total
    else:
        point = random.random() * total  # noqa: S311 - a traffic split, not a secret
    first = group[-1]
    for provider in group:
        point -= provider.weight
        if point < 0:
            first = provider
            break
    rest = sorted((p for p in group if p is not first), key=lambda p: -p.weight)
    return [first, *rest]


def _local_only(walk: _Walk) -> bool:
    request = walk.request
    return not request.allow_cloud or request.task in walk.policy.local_only_tasks


def _skip_reason(provider: ProviderConfig, local_only: bool, context_floor: int) -> str:
    if local_only and not provider.is_local:
        return "cloud_not_allowed"
    if context_floor and provider.context_window <= context_floor:
        return "context_too_small"
    return ""


async def _in_turn(
    walk: _Walk, candidates: Sequence[ProviderConfig], attempts: list[Attempt]
) -> _AttemptResult | RouteResult | None:
    """Priority failover: one provider at a time until one answers."""
    local_only = _local_only(walk)
    context_floor = 0
    for provider in candidates:
        skip = _skip_reason(provider, local_only, context_floor)
        if skip:
            attempts.append(Attempt(provider.name, "skipped", skip))
            continue
        if walk.deadline - walk.gateway.clock.mono() < MIN_ATTEMPT_S:
            attempts.append(Attempt(provider.name, "skipped", "deadline_exceeded"))
            break
        result = await _attempt(walk, provider)
        attempts.append(result.attempt)
        if result.answered:
            return result
        if result.error is not None:
            rule = ERROR_TABLE[result.error.error_class]
            if not rule.try_next:
                return _client_error(result.error, provider, attempts, walk.events)
            if rule.larger_context_only:
                context_floor = max(context_floor, provider.context_window)
    return None


async def _hedged(
    walk: _Walk, candidates: Sequence[ProviderConfig], attempts: list[Attempt]
) -> _AttemptResult | RouteResult | None:
    """Hedged failover: a provider that hasn't answered within `hedge_after_ms` gets company
    from the next one; the first good answer wins and the other call is cancelled. A call
    that fails is replaced at once, so at most two are in flight."""
    loop = asyncio.get_running_loop()
    hedge_s = walk.policy.hedge_after_ms / 1000
    queue = list(candidates)
    local_only = _local_only(walk)
    context_floor = 0
    running: dict[asyncio.Task[_AttemptResult], asyncio.Event] = {}

    def launch() -> bool:
        while queue:
            provider = queue.pop(0)
            skip = _skip_reason(provider, local_only, context_floor)
            if skip:
                attempts.append(Attempt(provider.name, "skipped", skip))
                continue
            if walk.deadline - walk.gateway.clock.mono() < MIN_ATTEMPT_S:
                attempts.append(Attempt(provider.name, "skipped", "deadline_exceeded"))
                queue.clear()
                return False
            cancel = asyncio.Event()
            running[asyncio.create_task(_attempt(walk, provider, cancel))] = cancel
            return True
        return False

    in_flight = 1
    hedge_at = loop.time() + hedge_s
    try:
        while True:
            while len(running) < in_flight and launch():
                pass
            if not running:
                return None
            timeout = max(0.0, hedge_at - loop.time()) if in_flight == 1 and queue else None
            done, _ = await asyncio.wait(
                set(running), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:  # the hedge timer: ask the next provider too
                in_flight = 2
                continue
            winner: _AttemptResult | None = None
            for task in done:
                del running[task]
                result = task.result()
                attempts.append(result.attempt)
                if result.answered:
                    if winner is None:
                        winner = result
                    else:  # two answers in the same instant: the second is discarded
                        await _discard(walk, result)
                elif result.error is not None:
                    rule = ERROR_TABLE[result.error.error_class]
                    if not rule.try_next:
                        await _cancel_all(walk, running, attempts)
                        provider = walk.snapshot.provider(result.attempt.provider)
                        assert provider is not None
                        return _client_error(result.error, provider, attempts, walk.events)
                    if rule.larger_context_only:
                        provider = walk.snapshot.provider(result.attempt.provider)
                        if provider is not None:
                            context_floor = max(context_floor, provider.context_window)
            if winner is not None:
                await _cancel_all(walk, running, attempts)
                return winner
            if not running:  # every call so far failed: the next one starts a new round
                in_flight = 1
                hedge_at = loop.time() + hedge_s
    finally:
        for task in running:  # only when something above raised
            task.cancel()


async def _cancel_all(
    walk: _Walk,
    running: dict[asyncio.Task[_AttemptResult], asyncio.Event],
    attempts: list[Attempt],
) -> None:
    for cancel in running.values():
        cancel.set()
    for result in await asyncio.gather(*running):
        attempts.append(result.attempt)
        if result.answered:
            await _discard(walk, result)
    running.clear()


async def _discard(walk: _Walk, result: _AttemptResult) -> None:
    """An answer that lost the race: a stream is closed and settled (as a good call)."""
    if result.stream is not None and result.ticket is not None:
        await result.stream.aclose()
        latency_s = walk.gateway.clock.mono() - result.ticket.started
        completion = result.stream.completion(latency_s * 1000)
        await _settle(walk, result.ticket, completion, None, latency_s, cache=False)
    result.attempt.detail = "not used: another provider answered first"


async def _admit(walk: _Walk, provider: ProviderConfig) -> _Ticket | _AttemptResult:
    """The breaker's and the budgets' say before a call: a ticket, or why it is skipped."""
    request, policy, gateway = walk.request, walk.policy, walk.gateway
    store, name = gateway.store, provider.name
    if gateway.adapters.get(provider) is None:
        return _AttemptResult(Attempt(name, "skipped", "unsupported_kind"))
    budgets = [b for b in walk.snapshot.budgets if b.applies_to(provider, request.client)]
    now = gateway.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now) for b in budgets}
    state, spent = await store.read(name, [key for key, _ in keys.values()])
    unhealthy = _health_gate(walk, state)
    if unhealthy:
        return _AttemptResult(Attempt(name, "skipped", unhealthy))

    decision = breaker.admit(name, state, policy, now)
    if decision.transition is not None:
        if await store.transition(name, state.version, decision.transition):
            walk.events.extend(decision.events)
            state = decision.transition
        else:  # another process moved the breaker first: decide again on what it did
            state, _ = await store.read(name)
            decision = breaker.admit(name, state, policy, now)
            if decision.transition is not None:
                return _AttemptResult(Attempt(name, "skipped", "probe_rejected"))
    if decision.admission == Admission.REJECT:
        walk.events.extend(decision.events)
        return _AttemptResult(Attempt(name, "skipped", decision.reason))

    estimate = provider.cost(
        estimate_tokens(request.completion.all_text()), request.completion.max_tokens or 256
    )
    budget_skip = budget_gate(budgets, keys, spent, estimate, request.priority)
    if budget_skip:
        return _AttemptResult(Attempt(name, "skipped", budget_skip))

    if walk.deadline - gateway.clock.mono() < MIN_ATTEMPT_S:  # the bookkeeping took the time
        return _AttemptResult(Attempt(name, "skipped", "deadline_exceeded"))
    was_probe = decision.admission == Admission.PROBE
    if was_probe and not await store.acquire_probe(
        name, state.version, policy.half_open_probes, gateway.clock.wall()
    ):
        walk.events.append(
            breaker.BreakerEvent(breaker.EventKind.PROBE_REJECTED, name, gateway.clock.wall())
        )
        return _AttemptResult(Attempt(name, "skipped", "probe_rejected"))
    return _Ticket(provider, state, was_probe, budgets, keys, gateway.clock.mono())


def _health_gate(walk: _Walk, state: BreakerState) -> str:
    """The sentinel's say (read with the breaker): down → skipped, degraded → skipped by high
    priority. An operator's word outranks it: a breaker forced closed, or the kill switch
    forcing this provider, takes calls whatever the checks say (and a disabled breaker is the
    breaker's to reject)."""
    if state.mode != breaker.Mode.AUTO or walk.policy.kill_switch == "force_provider":
        return ""
    return health_skip(state.health, walk.request.priority)


class _Cancelled(Exception):
    """The call lost a hedged race and was cancelled."""


async def _unless_cancelled(call: Any, cancel: asyncio.Event) -> Any:
    task = asyncio.ensure_future(call)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        value = await task
    except (asyncio.CancelledError, ProviderError):
        raise _Cancelled from None
    if isinstance(value, CompletionStream):  # it finished in the same instant
        await value.aclose()
    raise _Cancelled


async def _attempt(
    walk: _Walk, provider: ProviderConfig, cancel: asyncio.Event | None = None
) -> _AttemptResult:
    admitted = await _admit(walk, provider)
    if isinstance(admitted, _AttemptResult):
        return admitted
    ticket, gateway, name = admitted, walk.gateway, provider.name
    adapter = gateway.adapters.get(provider)
    assert adapter is not None  # checked on admission
    request = walk.request.completion
    # The time left is measured now, after the bookkeeping, so the call can't overrun it.
    timeout = max(MIN_ATTEMPT_S, min(provider.timeout_s, walk.deadline - ticket.started))
    completion: Completion | None = None
    stream: CompletionStream | None = None
    error: ProviderError | None = None
    try:
        if walk.request.stream:
            first_token_s = min(walk.policy.first_token_timeout_s, timeout)
            call: Any = adapter.stream(request, timeout=timeout, first_token_timeout=first_token_s)
        else:
            call = adapter.complete(request, timeout=timeout)
        value = await (call if cancel is None else _unless_cancelled(call, cancel))
        if isinstance(value, CompletionStream):
            stream = value
        else:
            completion = value
    except _Cancelled:
        if ticket.was_probe:  # it will never report: its slot goes to the next call
            await gateway.store.release_probe(name, ticket.state.version)
        latency_ms = round((gateway.clock.mono() - ticket.started) * 1000)
        return _AttemptResult(Attempt(name, "cancelled", latency_ms=latency_ms))
    except ProviderError as exc:
        error = exc
    except Exception as exc:
        # An adapter bug or an answer no rule foresaw: still this provider's failure, never
        # the client's 500. Logged in full, since it means the error table needs a row.
        logger.exception("provider %s failed in an unforeseen way", name)
        error = ProviderError(ErrorClass.MALFORMED, f"unexpected {type(exc).__name__}: {exc}")
    latency_s = gateway.clock.mono() - ticket.started

    if stream is not None:  # settled when it ends (finish_stream)
        attempt = Attempt(name, "ok", latency_ms=round(latency_s * 1000))
        return _AttemptResult(attempt, stream=stream, ticket=ticket)
    attempt, cost = await _settle(walk, ticket, completion, error, latency_s, cache=True)
    return _AttemptResult(attempt, completion, error=error, cost=cost)


async def _settle(
    walk: _Walk,
    ticket: _Ticket,
    completion: Completion | None,
    error: ProviderError | None,
    latency_s: float,
    *,
    cache: bool,
) -> tuple[Attempt, Decimal]:
    """Count a finished call: breaker, statistics, spend and (for a good answer) the cache, in
    one store round trip; then move the breaker if the call says so."""
    policy, gateway = walk.policy, walk.gateway
    store, provider = gateway.store, ticket.provider
    name = provider.name
    rule = ERROR_TABLE[error.error_class] if error is not None else None
    outcome = _breaker_outcome(error, rule, latency_s)
    cost = Decimal("0")
    spend: tuple[SpendIncrement, ...] = ()
    if completion is not None:  # what was used, even of an answer that broke off
        cost = provider.cost(completion.tokens_in, completion.tokens_out)
        if cost:
            spend = tuple(
                SpendIncrement(key, float(cost), ttl)
                for key, ttl in (ticket.keys[b.id] for b in ticket.budgets)
            )
    now = gateway.clock.wall()
    saved = None
    if cache and error is None and completion is not None and walk.cache_key:
        saved = cache_write(walk.cache_key, completion.text, name, now, walk.policy.cache_ttl_s)
    state = ticket.state
    current, stats = await store.record(
        name,
        Sample(
            ok=error is None or (rule is not None and not rule.breaker_failure),
            failure=outcome.breaker_failure,
            slow=breaker.is_slow(latency_s, policy),
            over_p95=breaker.is_over_p95(latency_s, policy),
            latency_ms=latency_s * 1000,
        ),
        now=now,
        windows=_windows(policy),
        want_stats=breaker.needs_window(outcome, policy),
        probe_version=state.version if ticket.was_probe else None,
        spend=spend,
        cache=saved,
    )
    new_state, new_events = breaker.on_outcome(
        name,
        current,
        stats,
        outcome,
        policy,
        now,
        was_probe=ticket.was_probe and current.version == state.version,
    )
    if new_state is not None and await store.transition(name, current.version, new_state):
        walk.events.extend(new_events)
        for event in new_events:
            logger.warning(
                "breaker %s %s (%s)", event.provider, event.kind.value, event.reason or "-"
            )

    latency_ms = round(latency_s * 1000)
    if error is None:
        return Attempt(name, "ok", latency_ms=latency_ms), cost
    attempt = Attempt(
        name,
        "error",
        error.error_class.value,
        latency_ms=latency_ms,
        status=error.status,
        detail=error.message[:200],
    )
    return attempt, cost


async def finish_stream(
    result: RouteResult, error: ProviderError | None = None, *, client_gone: bool = False
) -> None:
    """Settle a streamed answer once it has ended: whole (no error), broken by its provider
    (`error`: a breaker failure, and the answer is a failed one in the ledger) or abandoned
    by the client (`client_gone`: nothing against the provider, nothing cached)."""
    pending, stream = result._pending, result.stream
    if pending is None or stream is None:
        return
    result._pending = None
    walk, ticket, attempt = pending.walk, pending.ticket, pending.attempt
    latency_s = walk.gateway.clock.mono() - ticket.started
    completion = stream.completion(latency_s * 1000)
    whole = error is None and not client_gone
    settled, cost = await _settle(walk, ticket, completion, error, latency_s, cache=whole)
    attempt.outcome, attempt.error_class = settled.outcome, settled.error_class
    attempt.latency_ms, attempt.status, attempt.detail = (
        settled.latency_ms,
        settled.status,
        settled.detail,
    )
    result.text = completion.text
    result.tokens_in, result.tokens_out, result.cost = (
        completion.tokens_in,
        completion.tokens_out,
        cost,
    )
    result.finish_reason = _finish_reason(stream.finish_reason)
    if not whole:
        result.interrupted = True
        result.reason = "client_disconnected" if client_gone else "stream_interrupted"
        if error is not None:
            attempt.detail = f"after the first token: {error.message}"[:200]


def _finish_reason(reason: str) -> str:
    """An upstream's finish reason in OpenAI's words."""
    if reason in ("length", "max_tokens"):
        return "length"
    return "stop"


def _breaker_outcome(
    error: ProviderError | None, rule: ErrorRule | None, latency_s: float
) -> breaker.Outcome:
    if error is None or rule is None:
        return breaker.Outcome(ok=True, latency_s=latency_s)
    return breaker.Outcome(
        ok=False,
        latency_s=latency_s,
        breaker_failure=rule.breaker_failure,
        opens_breaker=rule.opens_breaker,
        cool_down=rule.cool_down,
        retry_after_s=error.retry_after_s,
        error_class=error.error_class.value,
    )


def _windows(policy: PolicyConfig) -> Windows:
    return Windows(policy.bucket_s, policy.failure_window_s, policy.p95_window_s)


def _reason_from(snapshot: Snapshot, attempts: list[Attempt]) -> str:
    """Why the primary didn't serve: `primary_breaker_open`, `primary_timeout` …"""
    primary = snapshot.primary
    for attempt in attempts:
        if (
            primary is not None
            and attempt.provider == primary.name
            and attempt.outcome not in ("ok", "cancelled")
        ):
            return f"primary_{attempt.error_class}"
    if any(a.outcome == "cancelled" for a in attempts):
        return "hedged"
    return "all_providers_failed" if attempts else ""


def _answered(
    walk: _Walk, result: _AttemptResult, attempts: list[Attempt], forced_reason: str
) -> RouteResult:
    primary = walk.snapshot.primary
    name = result.attempt.provider
    is_primary = primary is not None and name == primary.name
    reason = forced_reason or ("" if is_primary else _reason_from(walk.snapshot, attempts))
    if walk.request.prefer == name and not forced_reason:
        reason = "" if is_primary else "requested_by_name"
    routed = RouteResult(
        text="",
        tier="primary" if is_primary else "secondary",
        provider=name,
        reason=reason,
        attempts=attempts,
        events=walk.events,
    )
    if result.stream is not None:
        assert result.ticket is not None
        routed.text = result.stream.first
        routed.stream = result.stream
        routed._pending = _Pending(walk, result.ticket, result.attempt)
        return routed
    completion = result.completion
    assert completion is not None
    routed.text = completion.text
    routed.finish_reason = _finish_reason(completion.finish_reason)
    routed.tokens_in, routed.tokens_out = completion.tokens_in, completion.tokens_out
    routed.cost = result.cost
    return routed


def _client_error(
    error: ProviderError,
    provider: ProviderConfig,
    attempts: list[Attempt],
    events: list[BreakerEvent],
) -> RouteResult:
    status = error.status if error.status in (400, 422) else 400
    return RouteResult(
        text="",
        tier="none",
        status=status,
        reason="client_error",
        error={
            "code": "invalid_request",
            "message": f"The provider rejected the request: {error.message}",
            "provider": provider.name,
        },
        attempts=attempts,
        events=events,
    )


def _cached(
    walk: _Walk, hit: CachedAnswer, attempts: list[Attempt], reason: str, *, fallback: bool
) -> RouteResult:
    return RouteResult(
        text=hit.text,
        tier="cache",
        is_fallback=fallback,
        degradation_notice=CACHED_NOTICE if fallback else None,
        reason=reason,
        cache_hit=True,
        cached_age_s=hit.age_s(walk.gateway.clock.wall()),
        attempts=attempts,
        events=walk.events,
    )


async def _fallback(
    walk: _Walk, attempts: list[Attempt], reason: str, *, cache: bool
) -> RouteResult:
    """No provider answered: the cached answer, the static answer, or the apology."""
    if cache:
        hit = await cache_read(walk.gateway.store, walk.cache_key)
        if hit is not None:
            return _cached(walk, hit, attempts, reason, fallback=True)
    policy = walk.policy
    prompt = walk.request.completion.prompt
    match = walk.snapshot.faq.match(prompt, threshold=policy.static_match_threshold)
    if match is not None:
        return RouteResult(
            text=match.entry.answer,
            tier="static",
            is_fallback=True,
            degradation_notice=STATIC_NOTICE,
            reason=reason,
            static_answer_id=match.entry.answer_id,
            attempts=attempts,
            events=walk.events,
        )
    return RouteResult(
        text=policy.degradation_message,
        tier="degraded",
        is_fallback=True,
        degradation_notice=DEGRADED_NOTICE,
        reason=reason,
        attempts=attempts,
        events=walk.events,
    )
