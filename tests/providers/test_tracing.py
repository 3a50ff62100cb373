"""OpenTelemetry traces of the API's requests: real OTLP/HTTP from the gateway's exporter to a
receiver on 127.0.0.1, decoded with OpenTelemetry's own protobuf definitions."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from gateway.engine.breaker import Mode
from runtime.tracing import configured, tracing_from_env

pytestmark = pytest.mark.django_db(transaction=True)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "Say hello."}]}


class Receiver:
    """An OTLP/HTTP trace receiver: every span it is sent, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        receiver.resources.append(attributes(resource_spans.resource.attributes))
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            assert time.monotonic() < deadline, f"{len(self.spans)} spans of {count} in time"
            time.sleep(0.02)


def attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        out[pair.key] = (
            [item.string_value for item in value.array_value.values]
            if kind == "array_value"
            else getattr(value, kind)
        )
    return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


@pytest.fixture
def trace(gateway, receiver, monkeypatch):
    """Starts the test's gateway exporting to the receiver, as OTEL_EXPORTER_OTLP_ENDPOINT says,
    with the other variables as the test left them (the defaults unless set)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    for name in (
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "TRACES_TRUST_CALLER_SAMPLED",
        "TRACES_FORWARD_CALLER_TRACESTATE",
    ):
        monkeypatch.delenv(name, raising=False)
    started = []

    def start():
        tracing = tracing_from_env()
        assert tracing is not None
        gateway.tracing = tracing
        started.append(tracing)
        return tracing

    yield start
    gateway.tracing = None
    for tracing in started:
        tracing.shutdown()


@pytest.fixture
def traced(trace):
    return trace()


def _by_kind(spans: list[Span], kind: int) -> list[Span]:
    return [span for span in spans if span.kind == kind]


async def test_a_failed_over_request_arrives_as_a_trace_with_its_attempts(
    api, gateway, traced, receiver, primary, secondary
):
    primary.set_fault(mode="error")

    response = await api.post(
        "/v1/chat/completions", json=HELLO, headers={"traceparent": TRACEPARENT}
    )

    assert response.status_code == 200, response.text
    assert response.headers["X-Failover-Tier"] == "secondary"
    traced.provider.force_flush()
    spans = receiver.wait_for(3)
    [server] = _by_kind(spans, Span.SPAN_KIND_SERVER)
    calls = _by_kind(spans, Span.SPAN_KIND_CLIENT)
    assert receiver.resources[0]["service.name"] == "failover-gateway"
    # The caller's trace, continued.
    assert server.trace_id.hex() == CALLER_TRACE
    assert server.parent_span_id.hex() == CALLER_SPAN
    assert server.name == "chat auto"
    request = attributes(server.attributes)
    assert request["gen_ai.operation.name"] == "chat"
    assert request["gen_ai.request.model"] == "auto"
    assert request["gen_ai.response.model"] == "gpt-4o-mini"
    assert (request["failover.tier"], request["failover.provider"]) == ("secondary", "openai-cloud")
    assert request["failover.request_id"] == response.headers["X-Request-Id"]
    assert request["http.response.status_code"] == 200
    assert request["gen_ai.usage.output_tokens"] > 0
    assert request["gen_ai.response.finish_reasons"] == ["stop"]
    # A child span per attempt, in the order they were made.
    assert [call.parent_span_id for call in calls] == [server.span_id] * 2
    assert {call.trace_id.hex() for call in calls} == {CALLER_TRACE}
    failed, answered = sorted(calls, key=lambda call: call.start_time_unix_nano)
    failed_attributes, answered_attributes = (
        attributes(failed.attributes),
        attributes(answered.attributes),
    )
    assert failed_attributes["failover.provider"] == "ollama-local"
    assert (
        failed_attributes["gen_ai.provider.name"] == failed_attributes["gen_ai.system"] == "ollama"
    )
    assert failed_attributes["failover.attempt.outcome"] == "error"
    assert failed_attributes["error.type"]
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert failed.name == "chat llama3.1:8b"
    assert answered_attributes["gen_ai.provider.name"] == "openai"
    assert answered_attributes["failover.attempt.outcome"] == "ok"
    assert answered_attributes["gen_ai.usage.input_tokens"] > 0
    assert answered_attributes["server.address"] == "127.0.0.1"
    # Each provider call carried its own span's context upstream.
    sent = secondary.last_request("/v1/chat/completions")["headers"]["traceparent"]
    assert sent == f"00-{CALLER_TRACE}-{answered.span_id.hex()}-01"
    assert primary.last_request("/api/chat")["headers"]["traceparent"].split("-")[2] == (
        failed.span_id.hex()
    )
    # No prompt, no answer on any span.
    for span in spans:
        values = [str(v) for v in attributes(span.attributes).values()]
        assert not any("hello" in value.lower() for value in values)


async def test_a_provider_passed_over_and_a_stand_in_are_span_events(
    api, gateway, traced, receiver, primary, secondary
):
    await gateway.store.set_mode("ollama-local", Mode.DISABLED)
    secondary.stop()

    response = await api.post("/api/v1/complete", json={"prompt": "What are your opening hours?"})

    assert response.json()["tier"] == "static"
    traced.provider.force_flush()
    spans = receiver.wait_for(2)
    [server] = _by_kind(spans, Span.SPAN_KIND_SERVER)
    assert server.trace_id.hex() != CALLER_TRACE  # no caller's trace: a new one
    events = {event.name: attributes(event.attributes) for event in server.events}
    assert events["failover.skipped"]["failover.provider"] == "ollama-local"
    assert events["failover.skipped"]["failover.reason"]
    assert events["failover.stand_in"] == {"failover.tier": "static"}
    assert attributes(server.attributes)["failover.is_fallback"] is True
    [call] = _by_kind(spans, Span.SPAN_KIND_CLIENT)
    assert attributes(call.attributes)["failover.provider"] == "openai-cloud"


async def test_a_stream_is_one_span_that_ends_with_its_last_byte(
    api, gateway, traced, receiver, primary, secondary
):
    response = await api.post("/v1/chat/completions", json={**HELLO, "stream": True})
    assert response.status_code == 200
    traced.provider.force_flush()
    spans = receiver.wait_for(2)
    [server] = _by_kind(spans, Span.SPAN_KIND_SERVER)
    request = attributes(server.attributes)
    assert request["failover.stream"] is True
    assert request["failover.tier"] == "primary"
    assert request["gen_ai.usage.output_tokens"] > 0  # known only at the stream's end


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
            False,
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_TRACES_EXPORTER": "none",
            },
            False,
        ),
    ],
)
def test_tracing_is_off_unless_an_endpoint_is_configured(environ, on):
    assert configured(environ) is on


def test_a_process_without_tracing_loads_nothing_of_opentelemetry():
    program = (
        "import sys\n"
        "import failover_site.asgi\n"
        "from runtime.tracing import tracing_from_env\n"
        "assert tracing_from_env() is None\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('opentelemetry')}))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")} | {
        "DJANGO_SETTINGS_MODULE": "failover_site.settings",
        "ENV_FILE": "",
    }
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


async def test_a_request_the_caller_did_not_sample_is_traced_as_the_operators_sampler_says(
    api, gateway, traced, receiver, primary, secondary
):
    """The caller's trace is joined, its sampled flag unheard: the SDK's default sampler
    (parent-based, always on) decides the request as the start of a trace, and samples it."""
    unsampled = f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"
    response = await api.post(
        "/v1/chat/completions", json=HELLO, headers={"traceparent": unsampled}
    )
    assert response.status_code == 200
    traced.provider.force_flush()
    spans = receiver.wait_for(2)
    [server] = _by_kind(spans, Span.SPAN_KIND_SERVER)
    [call] = _by_kind(spans, Span.SPAN_KIND_CLIENT)
    assert (server.trace_id.hex(), server.parent_span_id.hex()) == (CALLER_TRACE, CALLER_SPAN)
    sent = primary.last_request("/api/chat")["headers"]["traceparent"]
    assert sent == f"00-{CALLER_TRACE}-{call.span_id.hex()}-01"


@pytest.mark.parametrize(
    ("variable", "value", "flags"),
    [
        # The operator's sampler leaves out a request its caller sampled.
        ("OTEL_TRACES_SAMPLER", "parentbased_always_off", "01"),
        # With TRACES_TRUST_CALLER_SAMPLED the default sampler follows the caller's choice.
        ("TRACES_TRUST_CALLER_SAMPLED", "true", "00"),
    ],
    ids=["operator-says-no", "trusted-caller-says-no"],
)
async def test_a_request_left_unsampled_records_nothing_and_passes_the_trace_on_unsampled(
    api, gateway, trace, receiver, primary, secondary, monkeypatch, variable, value, flags
):
    monkeypatch.setenv(variable, value)
    tracing = trace()
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-{flags}"

    response = await api.post(
        "/v1/chat/completions", json=HELLO, headers={"traceparent": traceparent}
    )

    assert response.status_code == 200
    tracing.provider.force_flush()
    assert receiver.spans == []
    sent = primary.last_request("/api/chat")["headers"]["traceparent"]
    version, trace_id, _, sent_flags = sent.split("-")
    assert (version, trace_id, sent_flags) == ("00", CALLER_TRACE, "00")


@pytest.mark.parametrize(
    ("forward", "upstream"), [(None, None), ("false", None), ("true", "congo=t61rcWkgMzE")]
)
async def test_a_callers_tracestate_goes_upstream_only_when_the_operator_allows_it(
    api, gateway, trace, receiver, primary, secondary, monkeypatch, forward, upstream
):
    if forward is not None:
        monkeypatch.setenv("TRACES_FORWARD_CALLER_TRACESTATE", forward)
    tracing = trace()

    response = await api.post(
        "/v1/chat/completions",
        json=HELLO,
        headers={"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"},
    )

    assert response.status_code == 200
    headers = primary.last_request("/api/chat")["headers"]
    assert headers.get("tracestate") == upstream
    assert headers["traceparent"].split("-")[1] == CALLER_TRACE  # the trace joined either way
    tracing.provider.force_flush()
    [server] = _by_kind(receiver.wait_for(2), Span.SPAN_KIND_SERVER)
    assert server.trace_state == (upstream or "")


async def test_what_a_call_left_out_is_named_on_its_span(
    api, gateway, traced, receiver, primary, secondary
):
    body = {**HELLO, "reasoning_effort": "high", "prompt_cache_key": "session-1"}

    response = await api.post("/v1/chat/completions", json=body)

    assert response.headers["X-Failover-Dropped"] == "prompt_cache_key,thinking"
    traced.provider.force_flush()
    [call] = _by_kind(receiver.wait_for(2), Span.SPAN_KIND_CLIENT)
    assert attributes(call.attributes)["failover.dropped"] == ["prompt_cache_key", "thinking"]
