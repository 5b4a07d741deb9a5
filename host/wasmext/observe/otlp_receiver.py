"""A minimal OTLP/HTTP trace receiver on loopback: each span a process exports becomes one
JSON line, for trying tracing out without a collector (and for tests).

    python -m wasmext.observe.otlp_receiver --port 4318 --out spans.jsonl

It takes `POST /v1/traces` with an `ExportTraceServiceRequest` in protobuf (the
`otlp-http` exporter's format; `opentelemetry-proto`, which `wasmext[otel]` brings),
gzip-encoded or not, and writes one JSON object per span: `trace_id`, `span_id`,
`parent_span_id` (hex, `""` for a root), `name`, `kind`, `service` (the resource's
`service.name`), `instance` (its `service.instance.id`, `""` if none), `start_ns`,
`end_ns`, `attributes`, `status_code`, `status_message`.
A request over `MAX_REQUEST_BYTES` (before or after gzip) is refused with 413, one
that does not decode with 400, one without a length with 411, a connection that stops
sending is dropped after `READ_TIMEOUT_S`; none stops the receiver. It is not a collector:
no auth, no TLS, loopback by default.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["MAX_REQUEST_BYTES", "ReceivedSpan", "Receiver", "decode", "main", "otlp_receiver"]

MAX_REQUEST_BYTES = 8 << 20  # one export batch; the SDK's default batch is far smaller
TRACES_PATH = "/v1/traces"
READ_TIMEOUT_S = 30.0  # one request's socket reads


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
    start_ns: int = 0
    end_ns: int = 0
    instance: str = ""  # the resource's service.instance.id (a worker's name), if any

    def to_json(self) -> str:
        """The span as one JSON line (no newline)."""
        return json.dumps(asdict(self), separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, line: str) -> ReceivedSpan:
        """A span from one line of the receiver's output."""
        return cls(**json.loads(line))


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ExportTraceServiceRequest (DecodeError when it is not one)."""
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
                    span.status.code, span.status.message,
                    span.start_time_unix_nano, span.end_time_unix_nano,
                    str(resource.get("service.instance.id") or "")))
    return out


def _gunzip(body: bytes, limit: int) -> bytes | None:
    """`body` inflated, or None when it is not gzip or inflates past `limit` (a bomb)."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error:
        return None
    return None if len(out) > limit or inflate.unconsumed_tail else out


class Receiver:
    """The spans received so far (written as JSON lines to `out` if given), and a way to
    wait for some."""

    def __init__(self, port: int, out: IO[str] | None = None) -> None:
        self.port = port
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.refused = 0
        self._out = out
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """The traces URL to configure."""
        return f"http://127.0.0.1:{self.port}{TRACES_PATH}"

    def add(self, spans: list[ReceivedSpan]) -> None:
        """Keep `spans` (one request's) and append them to the output."""
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1
            if self._out is not None:
                self._out.write("".join(s.to_json() + "\n" for s in spans))
                self._out.flush()  # a reader sees each batch as soon as it is answered

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


def _handler(receiver: Receiver, limit: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S  # a client that stops sending gives its thread back

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                length = -1
            if length < 0 or length > limit:  # unread: the connection is closed after
                receiver.refused += 1
                self.close_connection = True
                self.send_error(411 if length < 0 else 413)
                return
            body = self.rfile.read(length)
            if self.path != TRACES_PATH:
                self.send_error(404)
                return
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                inflated = _gunzip(body, limit)
                if inflated is None:
                    receiver.refused += 1
                    self.send_error(413)
                    return
                body = inflated
            try:
                spans = decode(body)
            except DecodeError:
                receiver.refused += 1
                self.send_error(400)
                return
            receiver.add(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass  # one line per export would drown the output

    return Handler


@contextmanager
def otlp_receiver(port: int = 0, out: IO[str] | None = None, host: str = "127.0.0.1",
                  limit: int = MAX_REQUEST_BYTES) -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on `host`:`port` (0: a free one) until the block ends."""
    receiver = Receiver(0, out)
    server = ThreadingHTTPServer((host, port), _handler(receiver, limit))
    server.daemon_threads = True
    receiver.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="wasmext-otlp-receiver",
                              daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def main(argv: list[str] | None = None) -> int:
    """Receive spans until SIGTERM or SIGINT, one JSON line each in --out (or stdout)."""
    ap = argparse.ArgumentParser(prog="python -m wasmext.observe.otlp_receiver",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--port", type=int, default=4318, help="port (0: a free one)")
    ap.add_argument("--out", type=Path, help="append spans here (default: stdout)")
    args = ap.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    out = args.out.open("a", encoding="utf-8") if args.out is not None else sys.stdout
    try:
        with otlp_receiver(args.port, out, args.host) as receiver:
            print(f"receiving OTLP/HTTP traces on http://{args.host}:{receiver.port}"
                  f"{TRACES_PATH}", file=sys.stderr, flush=True)
            while not stop.wait(0.5):  # a timed wait lets the handler in promptly
                pass
            print(f"received {len(receiver.spans)} spans in {receiver.requests} requests"
                  f" ({receiver.refused} refused)", file=sys.stderr, flush=True)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
