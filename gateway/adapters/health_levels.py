"""A health check's levels over one adapter (`messages.HealthLevel`): its model list answers,
the configured model is in it, and a one-token completion answers, each checked only once the
one before has passed, all within the check's time."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from gateway.adapters.errors import ProviderError
from gateway.adapters.messages import (
    HEALTH_PROBE,
    Completion,
    CompletionRequest,
    HealthLevel,
    HealthResult,
)


class Checked(Protocol):
    """What a check asks of an adapter (`base.ProviderAdapter`)."""

    async def request_json(
        self, method: str, path: str, *, timeout: float
    ) -> tuple[Any, float]: ...

    def model_problem(self, body: Any) -> str: ...

    async def complete(self, request: CompletionRequest, *, timeout: float) -> Completion: ...


async def checked(adapter: Checked, path: str, *, timeout: float, inference: bool) -> HealthResult:
    """The levels in turn within `timeout` overall: `path` (the model list) answers, the
    adapter's `model_problem` finds nothing in it, and with `inference` a one-token completion
    answers in the time left. Never raises a ProviderError: a failure is the result."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout

    def result(
        level: HealthLevel, detail: str = "", exc: ProviderError | None = None
    ) -> HealthResult:
        return HealthResult(
            ok=not detail,
            latency_ms=(loop.time() - started) * 1000,
            detail=detail,
            error_class=exc.error_class if exc is not None else None,
            level=level,
        )

    try:
        body, _ = await adapter.request_json("GET", path, timeout=timeout)
    except ProviderError as exc:
        return result(HealthLevel.REACHABLE, f"{path} failed: {_failure(exc)}", exc)
    problem = adapter.model_problem(body)
    if problem:
        return result(HealthLevel.MODEL, problem)
    if not inference:
        return result(HealthLevel.MODEL)
    try:
        # Whatever is left of the check's time, however little: too little is a timeout.
        await adapter.complete(HEALTH_PROBE, timeout=max(0.001, deadline - loop.time()))
    except ProviderError as exc:
        return result(HealthLevel.INFERENCE, f"inference failed: {_failure(exc)}", exc)
    return result(HealthLevel.INFERENCE)


def _failure(exc: ProviderError) -> str:
    """A failure as a check's detail, its class first: "timeout (no answer within 5.00 s)"."""
    return f"{exc.error_class.value} ({exc.message})" if exc.message else exc.error_class.value
