"""A real OTLP/HTTP trace receiver on loopback: decodes each ExportTraceServiceRequest
(opentelemetry-proto) a process sends to POST /v1/traces and keeps its spans."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    """One span as it arrived: ids in hex, attributes as plain values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0
    status_message: str = ""


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(ReceivedSpan(
                    span.name, span.trace_id.hex(), span.span_id.hex(),
                    span.parent_span_id.hex(), span.kind, str(resource.get("service.name")),
                    {a.key: _value(a.value) for a in span.attributes},
                    span.status.code, span.status.message))
    return out


class Receiver:
    """The spans received so far, and a way to wait for some."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """The traces URL to configure."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1

    def wait_for(self, ready: Callable[[list[ReceivedSpan]], bool],
                 timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """The spans once `ready(spans)` holds; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                spans = list(self.spans)
            if ready(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans received: {[s.name for s in spans]}")
            time.sleep(0.05)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on 127.0.0.1 (a free port) until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.add(decode(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(int(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
