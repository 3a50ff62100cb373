"""The OpenTelemetry side of `runtime/tracing.py`: the process's tracer provider, its OTLP/HTTP
exporter behind a batch processor, and the spans of a request and of its provider calls.

Attributes follow the GenAI semantic conventions (`gen_ai.operation.name`,
`gen_ai.provider.name` and the older `gen_ai.system`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.*`, `gen_ai.response.finish_reasons`), HTTP's and the
gateway's own `failover.*`. No prompt, answer, key or secret goes on a span: a provider is
named by its host, a failure by its class.

A caller's trace context is the caller's word, not the operator's: unless trusted, its sampled
flag never reaches the sampler (`SampledHere`), and unless allowed its `tracestate` is not read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TraceState,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

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
_TRACEPARENT = (b"traceparent",)
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# A provider the request went past without its answer: the request span's event for it.
PASSED_OVER = {
    AttemptOutcome.SKIPPED: "failover.skipped",
    AttemptOutcome.HEDGED: "failover.hedged",
}


class OtelTracing:
    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        trust_sampled: bool = False,
        forward_tracestate: bool = False,
    ) -> None:
        """`exporter`: OTLP over HTTP as the OTEL_EXPORTER_OTLP_* variables say, unless given.
        `trust_sampled`: a caller's sampled flag reaches the sampler (a parent-based one, the
        SDK's default, then follows it); `forward_tracestate`: a caller's `tracestate` is
        carried on, on the spans and to every provider call."""
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name.
        named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
        # The sampler is the one the OTEL_TRACES_SAMPLER* variables name, as the SDK builds it;
        # wrapped before the tracer is made, which takes it from the provider.
        self.provider = TracerProvider(resource=resource)
        if not trust_sampled:
            self.provider.sampler = SampledHere(self.provider.sampler)
        self.provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer(SERVICE_NAME)
        self.trace_headers = _TRACE_HEADERS if forward_tracestate else _TRACEPARENT

    def request(self, scope: Mapping[str, Any]) -> OtelRequest:
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in self.trace_headers
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
        # Not sampled (the sampler's choice; the caller's, when trusted): nothing to record, and
        # the provider calls carry the request's own context upstream, unsampled.
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


class SampledHere(Sampler):
    """The operator's sampler, deciding a request that arrives in a caller's trace as it decides
    one that starts a trace: on the caller's trace id (which a ratio sampler reads), the
    caller's sampled flag unheard. The trace goes on with the caller's `tracestate`, as far as
    it was read. A local parent (a provider call's request) is the sampler's to follow."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        if not parent.is_remote:
            return self.sampler.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        # An empty context: no parent (None would have the sampler read the current context).
        decided = self.sampler.should_sample(
            Context(), trace_id, name, kind, attributes, links, trace_state
        )
        return SamplingResult(decided.decision, decided.attributes, parent.trace_state)

    def get_description(self) -> str:
        return f"SampledHere{{{self.sampler.get_description()}}}"


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
