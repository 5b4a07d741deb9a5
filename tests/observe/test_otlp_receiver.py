"""The shipped OTLP/HTTP receiver (wasmext.observe.otlp_receiver): real exports from the
OpenTelemetry SDK arrive as JSON lines with their parent links; oversized, gzip-bomb and
garbage requests are refused by name and the receiver keeps answering."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from support import ROOT, free_port
from wasmext.observe.otlp_receiver import MAX_REQUEST_BYTES, ReceivedSpan, otlp_receiver
from wasmext.observe.tracing import Tracing, TracingSettings


def _export_two_spans(endpoint: str, service: str) -> tuple[str, str]:
    """A parent and a child span exported over OTLP/HTTP; their hex ids."""
    tracing = Tracing.with_exporter(OTLPSpanExporter(endpoint=endpoint),
                                    TracingSettings(enabled=True, service_name=service,
                                                    instance_id=f"{service}-1"))
    with tracing.span("outer") as outer, tracing.span("inner", {"k": "v", "n": 3}):
        pass
    tracing.provider.shutdown()
    ctx = outer.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def test_spans_arrive_as_json_lines_with_their_links() -> None:
    out = io.StringIO()
    with otlp_receiver(out=out) as receiver:
        trace_id, outer_id = _export_two_spans(receiver.endpoint, "svc-a")
        receiver.wait_for(lambda spans: len(spans) == 2, 10)
    lines = [ReceivedSpan.from_json(x) for x in out.getvalue().splitlines()]
    by_name = {s.name: s for s in lines}
    assert set(by_name) == {"outer", "inner"}
    assert by_name["outer"].span_id == outer_id and by_name["outer"].parent_span_id == ""
    assert by_name["inner"].parent_span_id == outer_id
    assert {s.trace_id for s in lines} == {trace_id}
    assert by_name["inner"].attributes == {"k": "v", "n": 3}
    assert by_name["inner"].service == "svc-a" and by_name["inner"].instance == "svc-a-1"
    assert 0 < by_name["inner"].start_ns <= by_name["inner"].end_ns


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, body, headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


def test_oversized_bombs_and_garbage_are_refused_and_it_carries_on() -> None:
    with otlp_receiver(limit=64 * 1024) as receiver:
        started = time.monotonic()
        big = _post(receiver.endpoint, b"\0" * (65 * 1024))
        bomb = _post(receiver.endpoint, gzip.compress(b"\0" * (4 << 20)),
                     {"Content-Encoding": "gzip"})
        garbage = _post(receiver.endpoint, b"\xff\xff\xff not protobuf")
        wrong = _post(receiver.endpoint.replace("/v1/traces", "/v1/logs"), b"")
        assert (big, bomb, garbage, wrong) == (413, 413, 400, 404)
        assert time.monotonic() - started < 5
        assert receiver.refused == 3 and receiver.spans == []
        _export_two_spans(receiver.endpoint, "after")  # still answering
        assert len(receiver.wait_for(lambda spans: len(spans) == 2, 10)) == 2
    assert MAX_REQUEST_BYTES >= 1 << 20  # an SDK batch of 512 spans fits


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    port, out = free_port(), tmp_path / "spans.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    proc = subprocess.Popen([sys.executable, "-m", "wasmext.observe.otlp_receiver",
                             "--port", str(port), "--out", str(out)],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        assert f"127.0.0.1:{port}/v1/traces" in proc.stderr.readline()
        trace_id, _ = _export_two_spans(f"http://127.0.0.1:{port}/v1/traces", "cmd")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert "received 2 spans in" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    spans = [ReceivedSpan.from_json(x) for x in out.read_text().splitlines()]
    assert [s.trace_id for s in spans] == [trace_id, trace_id]
