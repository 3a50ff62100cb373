"""The OpenTelemetry side of `runtime/tracing.py`: the process's tracer provider, its OTLP/HTTP
exporter behind a batch processor, and the spans of a request and of its provider calls.

Attributes follow the GenAI semantic conventions (`gen_ai.operation.name`,
`gen_ai.provider.name` and the older `gen_ai.system`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.*`, `gen_ai.response.finish_reasons`), HTTP's and the
gateway's own `failover.*`. No prompt, answer, key or secret goes on a span: a provider is
named by its host, a failure by its class.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.routing.result import RouteResult
from gateway.routing.walk import AttemptOutcome, RouteRequest

SERVICE_NAME = "failover-gateway"
PROPAGATOR = TraceContextTextMapPropagator()
# gen_ai.provider.name by provider kind (OpenTelemetry's well-known values where it has one).
PROVIDER_NAMES = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "ollama": "ollama",
}
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# A provider the request went past without its answer: the request span's event for it.
PASSED_OVER = {
    AttemptOutcome.SKIPPED: "failover.skipped",
    AttemptOutcome.HEDGED: "failover.hedged",
}


class OtelTracing:
    def __init__(self, exporter: SpanExporter | None = None) -> None:
        """`exporter`: OTLP over HTTP as the OTEL_EXPORTER_OTLP_* variables say, unless given."""
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name.
        named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer(SERVICE_NAME)

    def request(self, scope: Mapping[str, Any]) -> OtelRequest:
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _TRACE_HEADERS
        }
        parent = PROPAGATOR.extract(carrier) if carrier else None
        method, path = scope.get("method", ""), scope.get("path", "")
        span = self.tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        )
        return OtelRequest(self.tracer, span)

    def shutdown(self) -> None:
        self.provider.shutdown()


class OtelRequest:
    """One API request's span (`runtime.tracing.RequestSpan`)."""

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span
        self.context: Context = set_span_in_context(span)
        self.operation = "chat"
        # Not sampled (the sampler's choice, or the caller's): nothing to record, and the
        # provider calls carry the request's own context upstream, unsampled.
        self.recording = span.is_recording()
        self.unsampled: Unsampled | None = None if self.recording else Unsampled(self.context)

    def asked(
        self,
        *,
        operation: str,
        model: str,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        stream: bool,
    ) -> None:
        self.operation = operation
        if not self.recording:
            return
        self.span.update_name(f"{operation} {model}")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": model,
        }
        for name, value in (
            ("gen_ai.request.max_tokens", max_tokens),
            ("gen_ai.request.temperature", temperature),
            ("gen_ai.request.top_p", top_p),
            ("failover.stream", stream or None),
        ):
            if value is not None:
                attributes[name] = value
        self.span.set_attributes(attributes)

    def attempt(
        self, *, provider: str, kind: str, model: str, base_url: str, breaker: str, probe: bool
    ) -> OtelAttempt | Unsampled:
        if self.unsampled is not None:
            return self.unsampled
        url = urlsplit(base_url)
        system = PROVIDER_NAMES.get(kind, kind)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": system,
            "gen_ai.system": system,
            "gen_ai.request.model": model,
            "server.address": url.hostname or "",
            "failover.provider": provider,
            "failover.breaker.state": breaker,
        }
        if probe:
            attributes["failover.probe"] = True
        if url.port is not None:
            attributes["server.port"] = url.port
        span = self.tracer.start_span(
            f"{self.operation} {model}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return OtelAttempt(span, model)

    def routed(self, routed: RouteRequest, result: RouteResult) -> None:
        if not self.recording:
            return
        span = self.span
        attributes: dict[str, Any] = {
            "failover.request_id": routed.request_id,
            "failover.client": routed.client,
            "failover.tier": str(result.tier),
            "failover.outcome": result.outcome,
            "failover.cost": str(result.cost),
            "gen_ai.usage.input_tokens": result.tokens_in,
            "gen_ai.usage.output_tokens": result.tokens_out,
        }
        if result.is_fallback:
            attributes["failover.is_fallback"] = True
        if result.cache_hit:
            attributes["failover.cache_hit"] = True
        if result.provider:
            attributes["failover.provider"] = result.provider
        if result.reason:
            attributes["failover.reason"] = result.reason
        if result.error is None:
            attributes["gen_ai.response.finish_reasons"] = [result.finish_reason]
        answered = next(
            (a for a in result.attempts if a.outcome == AttemptOutcome.OK and a.model), None
        )
        if answered is not None:
            attributes["gen_ai.response.model"] = answered.model
        span.set_attributes(attributes)
        for attempt in result.attempts:
            event = PASSED_OVER.get(attempt.outcome)
            if event is not None:
                span.add_event(
                    event,
                    {
                        "failover.provider": attempt.provider,
                        "failover.reason": attempt.error_class,
                        "failover.detail": attempt.detail,
                    },
                )
        for moved in result.events:
            span.add_event(
                "failover.breaker",
                {
                    "failover.provider": moved.provider,
                    "failover.breaker.event": str(moved.kind),
                    "failover.reason": moved.reason,
                },
            )
        if result.is_fallback:
            span.add_event("failover.stand_in", {"failover.tier": str(result.tier)})
        if result.error is not None:
            span.set_attribute("error.type", result.error.code)

    def ended(self, status: int) -> None:
        if not self.recording:
            return
        self.span.set_attribute("http.response.status_code", status)
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


class OtelAttempt:
    """One provider call's span (`gateway.engine.tracing.AttemptTrace`)."""

    def __init__(self, span: Span, model: str) -> None:
        self.span = span
        self.model = model
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=set_span_in_context(span))
        self.headers = tuple(carrier.items())

    def upstream_headers(self) -> tuple[tuple[str, str], ...]:
        return self.headers

    def finished(
        self,
        *,
        outcome: str,
        error_class: str,
        status: int | None,
        latency_ms: int,
        tokens_in: int,
        tokens_out: int,
        finish_reason: str,
        cost: str,
        dropped: tuple[str, ...] = (),
    ) -> None:
        span = self.span
        attributes: dict[str, Any] = {"failover.attempt.outcome": outcome}
        if dropped:
            attributes["failover.dropped"] = list(dropped)
        if outcome == AttemptOutcome.OK:
            attributes["gen_ai.response.model"] = self.model
            attributes["gen_ai.usage.input_tokens"] = tokens_in
            attributes["gen_ai.usage.output_tokens"] = tokens_out
            if finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [finish_reason]
        if status is not None:
            attributes["http.response.status_code"] = status
        if cost:
            attributes["failover.cost"] = cost
        if outcome == AttemptOutcome.ERROR:
            attributes["error.type"] = error_class or "error"
            span.set_status(Status(StatusCode.ERROR, error_class))
        span.set_attributes(attributes)
        span.end()


class Unsampled:
    """A provider call of a request the sampler left out: no span, the request's context (its
    sampled flag off) sent upstream so the provider's own tracing follows the same choice."""

    def __init__(self, context: Context) -> None:
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=context)
        self.headers = tuple(carrier.items())

    def upstream_headers(self) -> tuple[tuple[str, str], ...]:
        return self.headers

    def finished(self, **ended: Any) -> None:
        pass
