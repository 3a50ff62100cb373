"""The cascade: for one request, who answers.

Kill switch → the answer cache when the policy saves cost with it → providers (by priority,
weighted or hedged, filtered by what the request allows, the breaker and the budgets), each
given min(its timeout, the time left) and judged by the error table (a call without a latency
history hedged at the first-byte bound: `hedge`; with every breaker open, one trickle call per
process: `trickle`) → the cached answer → the static answer → the degradation message.
docs/architecture.md, "A request's walk".

A streamed request is routed the same way up to its first token: a provider that fails before
then (or doesn't start within the policy's time to first token) is passed over like any other.
From the first token on the answer belongs to that provider; `finish_stream` settles its
bookkeeping once the stream has ended, whole or broken.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import CompletionRequest, context_needed, prompt_needed
from gateway.engine.clients import StandIn
from gateway.engine.config import ProviderConfig, Snapshot
from gateway.routing.answer_cache import CachedAnswer, answer_key, cache_read
from gateway.routing.ports import Ports, Runtime
from gateway.routing.result import RouteError, RouteResult
from gateway.routing.strategies import hedged, in_turn, ordered
from gateway.routing.streams import PendingStream, finish_reason
from gateway.routing.trickle import trickle
from gateway.routing.walk import (
    CANNOT_SERVE,
    TOO_SMALL,
    Attempt,
    AttemptOutcome,
    AttemptResult,
    Refused,
    RouteRequest,
    Tier,
    Walk,
)

__all__ = ["Attempt", "RouteError", "RouteRequest", "RouteResult", "finish_stream", "route"]

logger = logging.getLogger(__name__)

STATIC_NOTICE = (
    "The assistant is unavailable right now; this is a prepared answer to a common question."
)

CACHED_NOTICE = (
    "The assistant is unavailable right now; this answer was saved earlier and may be out of date."
)

DEGRADED_NOTICE = "The assistant is unavailable right now."


async def finish_stream(
    result: RouteResult, error: ProviderError | None = None, *, client_gone: bool = False
) -> RouteResult:
    """Settle a streamed answer once it has ended (`PendingStream.finish`): the result as it
    came to be, or `result` itself when there was nothing (left) to settle."""
    pending = result.pending
    end = await pending.finish(error, client_gone=client_gone) if pending is not None else None
    if end is None:
        return result
    return replace(
        result,
        text=end.text,
        tool_calls=end.tool_calls,
        reasoning=end.reasoning,
        reasoning_signature=end.reasoning_signature,
        tokens_in=end.tokens_in,
        tokens_out=end.tokens_out,
        cost=end.cost,
        tokens_estimated=end.tokens_estimated,
        finish_reason=end.finish_reason,
        interrupted=bool(end.interrupted_by),
        reason=end.interrupted_by or result.reason,
    )


async def route(request: RouteRequest, runtime: Runtime) -> RouteResult:
    snapshot = await runtime.snapshots.current()
    result = await _route(request, snapshot, runtime.ports)
    # The ledger keeps the prompt only where the policy says so (the result says not by default).
    return replace(result, store_prompt=True) if snapshot.policy.store_prompts else result


async def _route(request: RouteRequest, snapshot: Snapshot, ports: Ports) -> RouteResult:
    policy = snapshot.policy
    use_cache = request.use_cache and policy.cache_mode != "off"
    walk = Walk(
        request=request,
        snapshot=snapshot,
        ports=ports,
        deadline=ports.clock.mono() + policy.request_deadline_s,
        cache_key=(
            answer_key(request.completion, request.group, scope=request.cache_scope)
            if use_cache
            else ""
        ),
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
        and StandIn.CACHED in request.stand_ins
        # A provider asked for by name, or a task that takes no fallback, wants a fresh answer.
        and not request.prefer
        and request.task not in policy.no_fallback_tasks
    ):
        hit = await cache_read(ports.store, walk.cache_key)
        if hit is not None:
            return _cached(walk, hit, attempts, "cache_cost_saver", fallback=False)
        candidates = ordered(candidates, request, policy)
    else:
        candidates = ordered(candidates, request, policy)

    if policy.strategy == "hedged":
        answered = await hedged(walk, candidates, attempts)
    else:
        answered = await in_turn(walk, candidates, attempts)
    if answered is None:  # every breaker open: this process's trickle call, when it's its turn
        answered = await trickle(walk, attempts)
    if isinstance(answered, Refused):
        return _client_error(walk, answered.error, answered.provider, attempts)
    if answered is not None:
        return _answered(walk, answered, attempts, forced_reason)
    if attempts and all(a.error_class in (CANNOT_SERVE, TOO_SMALL) for a in attempts):
        # No provider reads its images: what may stand in is the client app's choice (none:
        # the 400 that says so).
        unread = all(a.detail.startswith("images: ") for a in attempts)
        if not (unread and request.stand_ins):
            return _none_can(walk, attempts)
        return await _fallback(walk, attempts, "no_provider_reads_images", cache=False)

    reason = forced_reason or _reason_from(snapshot, attempts) or "no_provider"
    if request.task and request.task in policy.no_fallback_tasks:
        return _unavailable(walk, attempts, reason, "this task takes no fallback answer.")
    return await _fallback(walk, attempts, reason, cache=bool(walk.cache_key))


def _reason_from(snapshot: Snapshot, attempts: list[Attempt]) -> str:
    """Why the primary didn't serve: `primary_breaker_open`, `primary_timeout` …"""
    primary = snapshot.primary
    for attempt in attempts:
        if (
            primary is not None
            and attempt.provider == primary.name
            and attempt.outcome != AttemptOutcome.OK
            # a hedge's loser has no error class; a stuck call moved on has (`stuck`)
            and (attempt.outcome != AttemptOutcome.CANCELLED or attempt.error_class)
        ):
            return f"primary_{attempt.error_class}"
    if any(a.outcome == AttemptOutcome.CANCELLED for a in attempts):
        return "hedged"
    return "all_providers_failed" if attempts else ""


def _answered(
    walk: Walk, result: AttemptResult, attempts: list[Attempt], forced_reason: str
) -> RouteResult:
    primary = walk.snapshot.primary
    name = result.attempt.provider
    is_primary = primary is not None and name == primary.name
    reason = forced_reason or ("" if is_primary else _reason_from(walk.snapshot, attempts))
    if (walk.request.prefer == name or name in dict(walk.request.group)) and not forced_reason:
        reason = "" if is_primary else "requested_by_name"
    tier = Tier.PRIMARY if is_primary else Tier.SECONDARY
    if result.stream is not None:
        assert result.ticket is not None
        first = result.stream.first
        return RouteResult(
            text=first if isinstance(first, str) else "",
            tier=tier,
            provider=name,
            reason=reason,
            stream=result.stream,
            pending=PendingStream(walk, result.ticket, result.attempt, result.stream),
            attempts=attempts,
            events=walk.events,
        )
    completion = result.completion
    assert completion is not None
    return RouteResult(
        text=completion.text,
        tier=tier,
        provider=name,
        reason=reason,
        tool_calls=completion.tool_calls,
        embeddings=completion.embeddings,
        reasoning=completion.reasoning,
        reasoning_signature=completion.reasoning_signature,
        finish_reason=finish_reason(completion.finish_reason),
        tokens_in=completion.tokens_in,
        tokens_out=completion.tokens_out,
        cost=result.cost,
        attempts=attempts,
        events=walk.events,
    )


def _client_error(
    walk: Walk, error: ProviderError, provider: ProviderConfig, attempts: list[Attempt]
) -> RouteResult:
    """A provider's 400 goes back as one, in the gateway's words only: an upstream's text is
    for the operator (the call record's attempts), never for the caller, who gets the request
    id to ask about."""
    status = error.status if error.status in (400, 422) else 400
    return RouteResult(
        text="",
        tier=Tier.NONE,
        status=status,
        reason="client_error",
        error=RouteError(
            "invalid_request",
            "The provider rejected the request as invalid; its reason is in the gateway's call "
            f"record for request {walk.request.request_id}.",
            provider=provider.name,
        ),
        attempts=attempts,
        events=walk.events,
    )


def _what(completion: CompletionRequest) -> str:
    if completion.embed:
        return "an embedding."
    return "a tool call." if completion.uses_tools else "a structured (JSON) answer."


def _cached(
    walk: Walk, hit: CachedAnswer, attempts: list[Attempt], reason: str, *, fallback: bool
) -> RouteResult:
    return RouteResult(
        text=hit.text,
        tier=Tier.CACHE,
        is_fallback=fallback,
        degradation_notice=CACHED_NOTICE if fallback else None,
        reason=reason,
        cache_hit=True,
        cached_age_s=hit.age_s(walk.ports.clock.wall()),
        attempts=attempts,
        events=walk.events,
    )


def _none_can(walk: Walk, attempts: list[Attempt]) -> RouteResult:
    """Every provider was passed over for what the request asks (tools, JSON, a parameter its
    dialect refuses, a conversation longer than its context window): the caller's request,
    not an outage, so a 400 that names the parameter."""
    if any(a.error_class == TOO_SMALL for a in attempts):
        completion = walk.request.completion
        needed = context_needed(completion)
        largest = max(p.context_window for p in walk.snapshot.providers)
        error = RouteError(
            "context_length_exceeded",
            f"The conversation and the answer asked for need about {needed} tokens; the "
            f"largest context window here is {largest}.",
            param="messages",
            context=(prompt_needed(completion), completion.max_tokens or 0, largest),
        )
    else:
        parameter = attempts[0].detail.partition(": ")[0]
        reasons = "; ".join(f"{a.provider}: {a.detail.partition(': ')[2]}" for a in attempts)
        what = "reads images" if parameter == "images" else f"can take '{parameter}'"
        error = RouteError(
            "unsupported_by_providers", f"No provider here {what} ({reasons}).", param=parameter
        )
    return RouteResult(
        text="",
        tier=Tier.NONE,
        status=400,
        reason=error.code,
        error=error,
        attempts=attempts,
        events=walk.events,
    )


def _unavailable(walk: Walk, attempts: list[Attempt], reason: str, why: str) -> RouteResult:
    """The 503 of a request nothing may answer, with when a retry may find a provider."""
    return RouteResult(
        text="",
        tier=Tier.NONE,
        status=503,
        reason=reason,
        error=RouteError("providers_unavailable", f"No provider could answer, and {why}"),
        retry_after_s=walk.retry_after_s(),
        attempts=attempts,
        events=walk.events,
    )


async def _fallback(
    walk: Walk, attempts: list[Attempt], reason: str, *, cache: bool
) -> RouteResult:
    """No provider answered: the cached answer, the static answer, or the apology, each only
    if the client app takes it as a stand-in. A request whose answer must be a tool call or
    JSON gets neither of the last two: no prepared text can stand in for it. Either way the
    alternative is a 503 the client can retry."""
    stand_ins = walk.request.stand_ins
    if cache and StandIn.CACHED in stand_ins:
        hit = await cache_read(walk.ports.store, walk.cache_key)
        if hit is not None:
            return _cached(walk, hit, attempts, reason, fallback=True)
    completion = walk.request.completion
    if completion.embed or completion.uses_tools or completion.output is not None:
        why = "no prepared answer can stand in for " + _what(completion)
        return _unavailable(walk, attempts, reason, why)
    policy = walk.policy
    prompt = walk.request.completion.prompt
    match = (
        walk.snapshot.faq.match(prompt, threshold=policy.static_match_threshold)
        if StandIn.STATIC in stand_ins
        else None
    )
    if match is not None:
        return RouteResult(
            text=match.entry.answer,
            tier=Tier.STATIC,
            is_fallback=True,
            degradation_notice=STATIC_NOTICE,
            reason=reason,
            static_answer_id=match.entry.answer_id,
            attempts=attempts,
            events=walk.events,
        )
    if StandIn.DEGRADED not in stand_ins:
        return _unavailable(walk, attempts, reason, "no stand-in this client app takes is at hand.")
    return RouteResult(
        text=policy.degradation_message,
        tier=Tier.DEGRADED,
        is_fallback=True,
        degradation_notice=DEGRADED_NOTICE,
        reason=reason,
        attempts=attempts,
        events=walk.events,
    )
