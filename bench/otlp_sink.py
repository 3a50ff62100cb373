"""An OTLP/HTTP trace receiver for the bench (`bench_complete.py --otel`): it takes every export
the gateway's batch processor sends to POST /v1/traces, counts the spans in it (decoded with
OpenTelemetry's own protobuf definitions) and drops them; GET /count answers
{"exports": n, "spans": n}, so the bench can check the traced gateway really exported.

    python bench/otlp_sink.py PORT
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ANSWER = ExportTraceServiceResponse().SerializeToString()
_counts = {"exports": 0, "spans": 0}
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's session expects

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        spans = sum(
            len(scope.spans)
            for resource in request.resource_spans
            for scope in resource.scope_spans
        )
        with _lock:
            _counts["exports"] += 1
            _counts["spans"] += spans
        self._reply(200, "application/x-protobuf", ANSWER)

    def do_GET(self) -> None:  # noqa: N802
        with _lock:
            body = json.dumps(_counts).encode()
        self._reply(200, "application/json", body)

    def _reply(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
