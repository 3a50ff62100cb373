"""The cascade: for one request, who answers.

Kill switch → providers by priority (filtered by what the request allows, the breaker and the
budgets), each given min(its timeout, the time left) and judged by the error table → static
answer → degradation message. DESIGN.md, "A request's walk".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from billing.budgets import budget_gate

from . import breaker
from .adapters.base import Completion, CompletionRequest, estimate_tokens
from .adapters.errors import ERROR_TABLE, ErrorClass, ErrorRule, ProviderError
from .breaker import Admission, BreakerEvent
from .gateway import Gateway
from .snapshot import PolicyConfig, ProviderConfig, Snapshot
from .state import Sample, SpendIncrement, Windows, spend_key

logger = logging.getLogger(__name__)

# An attempt with less time than this left isn't worth starting.
MIN_ATTEMPT_S = 0.05

STATIC_NOTICE = (
    "The assistant is unavailable right now; this is a prepared answer to a common question."
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


@dataclass(slots=True)
class Attempt:
    provider: str
    outcome: str  # ok / error / skipped
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
    tier: str  # primary / secondary / static / degraded / none
    status: int = 200
    provider: str = ""
    is_fallback: bool = False
    degradation_notice: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal("0")
    reason: str = ""
    static_answer_id: int | None = None
    error: dict[str, Any] | None = None
    store_prompt: bool = False  # the policy keeps prompts in the ledger
    attempts: list[Attempt] = field(default_factory=list)
    events: list[BreakerEvent] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return "rejected" if self.status < 500 else "failed"
        return "fallback" if self.is_fallback else "ok"


async def route(request: RouteRequest, gateway: Gateway) -> RouteResult:
    snapshot = await gateway.snapshots.current()
    result = await _route(request, snapshot, gateway)
    result.store_prompt = snapshot.policy.store_prompts
    return result


async def _route(request: RouteRequest, snapshot: Snapshot, gateway: Gateway) -> RouteResult:
    policy = snapshot.policy
    deadline = gateway.clock.mono() + policy.request_deadline_s
    attempts: list[Attempt] = []
    events: list[BreakerEvent] = []

    if policy.kill_switch == "static_only":
        return _fallback(request, snapshot, attempts, events, "kill_switch_static_only")
    candidates = snapshot.providers
    forced_reason = ""
    if policy.kill_switch == "force_provider":
        forced = snapshot.provider(policy.kill_switch_provider)
        candidates = (forced,) if forced is not None else ()
        forced_reason = "kill_switch_forced"

    local_only = not request.allow_cloud or request.task in policy.local_only_tasks
    context_floor = 0
    for provider in candidates:
        skip = _skip_reason(provider, local_only, context_floor)
        if skip:
            attempts.append(Attempt(provider.name, "skipped", skip))
            continue
        remaining = deadline - gateway.clock.mono()
        if remaining < MIN_ATTEMPT_S:
            attempts.append(Attempt(provider.name, "skipped", "deadline_exceeded"))
            break
        result = await _attempt(request, provider, snapshot, gateway, deadline, events)
        attempts.append(result.attempt)
        if result.completion is not None:
            return _answered(request, snapshot, result, attempts, events, forced_reason)
        if result.error is not None:
            rule = ERROR_TABLE[result.error.error_class]
            if not rule.try_next:
                return _client_error(result.error, provider, attempts, events)
            if rule.larger_context_only:
                context_floor = max(context_floor, provider.context_window)

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
            events=events,
        )
    return _fallback(request, snapshot, attempts, events, reason)


def _skip_reason(provider: ProviderConfig, local_only: bool, context_floor: int) -> str:
    if local_only and not provider.is_local:
        return "cloud_not_allowed"
    if context_floor and provider.context_window <= context_floor:
        return "context_too_small"
    return ""


@dataclass(slots=True)
class _AttemptResult:
    attempt: Attempt
    completion: Completion | None = None
    error: ProviderError | None = None
    cost: Decimal = Decimal("0")


async def _attempt(
    request: RouteRequest,
    provider: ProviderConfig,
    snapshot: Snapshot,
    gateway: Gateway,
    deadline: float,
    events: list[BreakerEvent],
) -> _AttemptResult:
    policy, store, name = snapshot.policy, gateway.store, provider.name
    adapter = gateway.adapters.get(provider)
    if adapter is None:
        return _AttemptResult(Attempt(name, "skipped", "unsupported_kind"))
    budgets = [b for b in snapshot.budgets if b.applies_to(provider, request.client)]
    now = gateway.clock.wall()
    keys = {b.id: spend_key(b.id, b.period, now) for b in budgets}
    state, spent = await store.read(name, [key for key, _ in keys.values()])

    decision = breaker.admit(name, state, policy, now)
    if decision.transition is not None:
        if await store.transition(name, state.version, decision.transition):
            events.extend(decision.events)
            state = decision.transition
        else:  # another process moved the breaker first: decide again on what it did
            state, _ = await store.read(name)
            decision = breaker.admit(name, state, policy, now)
            if decision.transition is not None:
                return _AttemptResult(Attempt(name, "skipped", "probe_rejected"))
    if decision.admission == Admission.REJECT:
        events.extend(decision.events)
        return _AttemptResult(Attempt(name, "skipped", decision.reason))

    estimate = provider.cost(
        estimate_tokens(request.completion.prompt + request.completion.system_prompt),
        request.completion.max_tokens or 256,
    )
    budget_skip = budget_gate(budgets, keys, spent, estimate, request.priority)
    if budget_skip:
        return _AttemptResult(Attempt(name, "skipped", budget_skip))

    if deadline - gateway.clock.mono() < MIN_ATTEMPT_S:  # the bookkeeping took the time left
        return _AttemptResult(Attempt(name, "skipped", "deadline_exceeded"))
    was_probe = decision.admission == Admission.PROBE
    if was_probe and not await store.acquire_probe(
        name, state.version, policy.half_open_probes, gateway.clock.wall()
    ):
        events.append(
            breaker.BreakerEvent(breaker.EventKind.PROBE_REJECTED, name, gateway.clock.wall())
        )
        return _AttemptResult(Attempt(name, "skipped", "probe_rejected"))

    started = gateway.clock.mono()
    # The time left is measured now, after the bookkeeping above, so the call can't overrun it.
    timeout = max(MIN_ATTEMPT_S, min(provider.timeout_s, deadline - started))
    completion: Completion | None = None
    error: ProviderError | None = None
    try:
        completion = await adapter.complete(request.completion, timeout=timeout)
    except ProviderError as exc:
        error = exc
    except Exception as exc:
        # An adapter bug or an answer no rule foresaw: still this provider's failure, never
        # the client's 500. Logged in full, since it means the error table needs a row.
        logger.exception("provider %s failed in an unforeseen way", name)
        error = ProviderError(ErrorClass.MALFORMED, f"unexpected {type(exc).__name__}: {exc}")
    latency_s = gateway.clock.mono() - started

    rule = ERROR_TABLE[error.error_class] if error is not None else None
    outcome = _breaker_outcome(completion, error, rule, latency_s)
    cost = Decimal("0")
    spend: tuple[SpendIncrement, ...] = ()
    if completion is not None:
        cost = provider.cost(completion.tokens_in, completion.tokens_out)
        if cost:
            spend = tuple(
                SpendIncrement(key, float(cost), ttl) for key, ttl in (keys[b.id] for b in budgets)
            )
    now = gateway.clock.wall()
    current, stats = await store.record(
        name,
        Sample(
            ok=completion is not None or (rule is not None and not rule.breaker_failure),
            failure=outcome.breaker_failure,
            slow=breaker.is_slow(latency_s, policy),
            over_p95=breaker.is_over_p95(latency_s, policy),
            latency_ms=latency_s * 1000,
        ),
        now=now,
        windows=_windows(policy),
        want_stats=breaker.needs_window(outcome, policy),
        probe_version=state.version if was_probe else None,
        spend=spend,
    )
    new_state, new_events = breaker.on_outcome(
        name,
        current,
        stats,
        outcome,
        policy,
        now,
        was_probe=was_probe and current.version == state.version,
    )
    if new_state is not None and await store.transition(name, current.version, new_state):
        events.extend(new_events)
        for event in new_events:
            logger.warning(
                "breaker %s %s (%s)", event.provider, event.kind.value, event.reason or "-"
            )

    latency_ms = round(latency_s * 1000)
    if completion is not None:
        return _AttemptResult(Attempt(name, "ok", latency_ms=latency_ms), completion, cost=cost)
    assert error is not None
    attempt = Attempt(
        name,
        "error",
        error.error_class.value,
        latency_ms=latency_ms,
        status=error.status,
        detail=error.message[:200],
    )
    return _AttemptResult(attempt, error=error)


def _breaker_outcome(
    completion: Completion | None,
    error: ProviderError | None,
    rule: ErrorRule | None,
    latency_s: float,
) -> breaker.Outcome:
    if completion is not None or error is None or rule is None:
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
        if primary is not None and attempt.provider == primary.name and attempt.outcome != "ok":
            return f"primary_{attempt.error_class}"
    return "all_providers_failed" if attempts else ""


def _answered(
    request: RouteRequest,
    snapshot: Snapshot,
    result: _AttemptResult,
    attempts: list[Attempt],
    events: list[BreakerEvent],
    forced_reason: str,
) -> RouteResult:
    completion = result.completion
    assert completion is not None
    primary = snapshot.primary
    is_primary = primary is not None and completion.provider == primary.name
    return RouteResult(
        text=completion.text,
        tier="primary" if is_primary else "secondary",
        provider=completion.provider,
        tokens_in=completion.tokens_in,
        tokens_out=completion.tokens_out,
        cost=result.cost,
        reason=forced_reason or ("" if is_primary else _reason_from(snapshot, attempts)),
        attempts=attempts,
        events=events,
    )


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


def _fallback(
    request: RouteRequest,
    snapshot: Snapshot,
    attempts: list[Attempt],
    events: list[BreakerEvent],
    reason: str,
) -> RouteResult:
    policy = snapshot.policy
    match = snapshot.faq.match(request.completion.prompt, threshold=policy.static_match_threshold)
    if match is not None:
        return RouteResult(
            text=match.entry.answer,
            tier="static",
            is_fallback=True,
            degradation_notice=STATIC_NOTICE,
            reason=reason,
            static_answer_id=match.entry.answer_id,
            attempts=attempts,
            events=events,
        )
    return RouteResult(
        text=policy.degradation_message,
        tier="degraded",
        is_fallback=True,
        degradation_notice=DEGRADED_NOTICE,
        reason=reason,
        attempts=attempts,
        events=events,
    )
