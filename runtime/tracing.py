"""Traces of the frontends' requests over OpenTelemetry, off unless configured.

A serving process exports traces when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, `OTEL_TRACES_EXPORTER` is unset or `otlp`, and
`OTEL_SDK_DISABLED` isn't true; the SDK reads the rest of the usual OTEL_* variables itself
(headers, timeout, compression, sampler, resource attributes, the batch processor's sizes).

Each request to the API gets a server span (`RequestSpan`), each provider call a child client
span (`gateway/routing/attempt_trace.py`), named and attributed by OpenTelemetry's GenAI
semantic conventions plus the gateway's own `failover.*` attributes; a provider passed over, a
breaker that moved and the stand-in that answered are span events. The caller's trace
(`traceparent`) is continued, and each provider call carries its own upstream. The operator
decides what else of the caller's context counts: whether a request is sampled is the sampler's
choice (`OTEL_TRACES_SAMPLER`), the caller's sampled flag heard only with
`TRACES_TRUST_CALLER_SAMPLED`, and the caller's `tracestate` goes on only with
`TRACES_FORWARD_CALLER_TRACESTATE`. Spans leave through a batch processor on a thread of its
own, never on a request's path. With tracing off nothing of OpenTelemetry is imported, and a
request pays one context lookup per provider call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.engine.tracing import RequestTrace
from gateway.routing.result import RouteResult
from gateway.routing.walk import RouteRequest


class RequestSpan(RequestTrace, Protocol):
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
        """What the request asks for, once its body is read."""
        ...

    def routed(self, routed: RouteRequest, result: RouteResult) -> None:
        """Who answered and how: the request's outcome, its skips, breaker moves and cost."""
        ...

    def ended(self, status: int) -> None:
        """The answer sent (a stream's last byte included): the span ends."""
        ...


class Tracing(Protocol):
    def request(self, scope: Mapping[str, Any]) -> RequestSpan:
        """A server span for the API request `scope`, continuing the caller's trace (what of
        its context counts as the process was configured)."""
        ...

    def shutdown(self) -> None:
        """Export what is left (bounded by the exporter's timeout) and stop."""
        ...


def configured(environ: Mapping[str, str]) -> bool:
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return bool(endpoint) and exporter in ("", "otlp") and not disabled


def _switch(environ: Mapping[str, str], name: str) -> bool:
    """An on/off variable, off unless set to true (or on, yes, 1)."""
    return environ.get(name, "").strip().lower() in ("true", "on", "yes", "1")


def tracing_from_env(environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """The process's tracing, as its environment configures it; None when off."""
    if not configured(environ):
        return None
    # OpenTelemetry's SDK and exporter load only in a process that exports traces: tens of
    # milliseconds of start-up and several MiB that a process without tracing never pays.
    from runtime.otel import OtelTracing

    # Read here with the OTEL_* variables: what of a caller's trace context a request takes on
    # is the operator's choice, off by default (docs/configuration.md).
    return OtelTracing(
        trust_sampled=_switch(environ, "TRACES_TRUST_CALLER_SAMPLED"),
        forward_tracestate=_switch(environ, "TRACES_FORWARD_CALLER_TRACESTATE"),
    )
