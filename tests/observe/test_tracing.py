"""OpenTelemetry tracing (wasmext.observe.tracing): span shapes and parent links with an
in-memory exporter, plugin-controlled text cleaned, off by default and optional."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from wasmext import ConfigError, Host, HostConfig
from wasmext.config import parse_config
from wasmext.observe import tracing
from wasmext.observe.tracing import Tracing, TracingSettings
from wasmext.runtime import Runtime
from wasmext.testing import DATA_AT, guest_wat

ROOT = Path(__file__).resolve().parents[2]
HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
UNSAFE = "\x1b]8;;http://evil\x07\x1b[2J\r\n\u202e\x00"


def asking(request: dict[str, Any], hook: str = "on_plain_text") -> bytes:
    """A guest whose `hook` sends `request` and answers with the host's answer."""
    raw = msgpack.packb(request)
    return bytes(wasmtime.wat2wasm(guest_wat(
        f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
        imports=HOST_CALL, data=raw, memory_pages=8,
        registration={"hooks": [{"hook": hook}], "abi_minor": 1})))


def answering(response: Any, hook: str = "on_plain_text") -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(response=response, hooks=(hook,),
                                             memory_pages=8)))


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def host(exporter: InMemorySpanExporter, tmp_path: Path) -> Iterator[Host]:
    config = HostConfig(data_dir=tmp_path, state_backend="memory")
    with Host(config, runtime=Runtime(cache=False), plugin_dirs=[],
              tracing=Tracing.with_exporter(exporter)) as h:
        yield h
    assert tracing.ACTIVE is None  # closing the host switched tracing off again


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_session_hook_and_leaving_op_nest(host: Host, exporter: InMemorySpanExporter) -> None:
    host.tools.register_python("echo", lambda args: args)
    host.add(asking({"op": "tool.call", "name": "echo", "args": {"v": 1}}),
             plugin_id="asker", grants={"tools", "tool:echo"})
    with host.session("s-1") as s:
        s.on_plain_text("hello")
        trace_id = s.context["trace_id"]
    spans = by_name(exporter)
    session, hook = spans["wasmext.session"], spans["wasmext.hook on_plain_text"]
    op = spans["wasmext.op tool.call"]
    assert session.parent is None
    assert parent_of(hook) == session.context.span_id
    assert parent_of(op) == hook.context.span_id
    assert {session.context.trace_id, hook.context.trace_id, op.context.trace_id} == {
        session.context.trace_id}
    # Plugins' meta.context names the same trace an operator looks up.
    assert trace_id == format(session.context.trace_id, "032x")
    assert session.attributes is not None and session.attributes["wasmext.session_id"] == "s-1"
    attrs = dict(hook.attributes or {})
    assert attrs["wasmext.plugin_id"] == "asker" and attrs["wasmext.hook"] == "on_plain_text"
    assert attrs["wasmext.outcome"] == "ok"
    assert isinstance(attrs["wasmext.fuel_used"], int) and attrs["wasmext.fuel_used"] > 0
    assert isinstance(attrs["wasmext.duration_ms"], float) and attrs["wasmext.duration_ms"] > 0
    assert dict(op.attributes or {}) == {"wasmext.plugin_id": "asker", "wasmext.op": "tool.call",
                                         "wasmext.tool": "echo", "wasmext.outcome": "ok"}


def test_state_commit_has_its_span_inside_the_hook(host: Host,
                                                   exporter: InMemorySpanExporter) -> None:
    host.add(asking({"op": "state.set", "key": "k", "value": 1}), plugin_id="writer",
             grants={"state"})
    host.add(asking({"op": "config.get"}, hook="on_llm_output"), plugin_id="reader")
    with host.session() as s:
        s.on_plain_text("x")
        s.on_llm_output("y")
    spans = by_name(exporter)
    commit = spans["wasmext.state.commit"]
    assert parent_of(commit) == spans["wasmext.hook on_plain_text"].context.span_id
    assert (commit.attributes or {})["wasmext.state.changes"] == 1
    # Ops that stay in the host (config.get, state.set itself) make no span of their own.
    assert not any(name.startswith("wasmext.op ") for name in spans)


def test_a_failed_hook_span_is_an_error_and_the_async_session_nests(
        host: Host, exporter: InMemorySpanExporter) -> None:
    import asyncio

    host.add(answering({"ok": False, "error": {"code": "nope", "message": "broken"}}),
             plugin_id="failing")

    async def main() -> None:
        async with host.asession(inline_below_ms=0) as s:  # every call on a pool thread
            await s.on_plain_text("x")

    asyncio.run(main())
    spans = by_name(exporter)
    hook = spans["wasmext.hook on_plain_text"]
    assert hook.status.status_code is StatusCode.ERROR
    assert hook.status.description == "nope: broken"
    assert (hook.attributes or {})["wasmext.outcome"] == "failed"
    # Run on another thread, the hook still hangs under its session's span.
    assert parent_of(hook) == spans["wasmext.session"].context.span_id


def test_hostile_text_in_span_attributes_is_cleaned_and_bounded(
        host: Host, exporter: InMemorySpanExporter) -> None:
    """A plugin's tool name and error message reach span attributes and statuses only as
    one inert, bounded line; the host keeps serving."""
    huge_name = UNSAFE + "t" * 40_000  # the guest data segment has ~56 KB
    huge_error = UNSAFE + "e" * 40_000
    host.add(asking({"op": "tool.call", "name": huge_name, "args": {}}), plugin_id="prober",
             grants={"tools", "tool:*"})
    host.add(answering({"ok": False, "error": {"code": UNSAFE, "message": huge_error}},
                       hook="on_llm_output"), plugin_id="liar")
    host.add(answering({"ok": True, "value": "alive"}, hook="on_tag"), plugin_id="healthy")
    started = time.monotonic()
    with host.session() as s:
        s.on_plain_text("x")
        s.on_llm_output("y")
    assert time.monotonic() - started < 3
    spans = by_name(exporter)
    op = spans["wasmext.op tool.call"]
    failed = spans["wasmext.hook on_llm_output"]
    texts = [*(op.attributes or {}).values(), *(failed.attributes or {}).values(),
             op.status.description, failed.status.description]
    for value in texts:
        if isinstance(value, str):
            assert not any(ch in value for ch in "\x1b\x07\r\n\x00\u202e"), value[:80]
    tool = (op.attributes or {})["wasmext.tool"]
    assert isinstance(tool, str) and len(tool) <= tracing.ATTR_CAP and "chars]" in tool
    assert op.status.status_code is StatusCode.ERROR  # no such tool
    assert (op.attributes or {})["wasmext.outcome"] == "tool_error"
    assert failed.status.description is not None
    assert len(failed.status.description) <= tracing.STATUS_CAP
    assert "…[+" in failed.status.description
    assert all(len(str(v)) <= tracing.STATUS_CAP for s in exporter.get_finished_spans()
               for v in (s.attributes or {}).values())
    assert host.plugins["healthy"].plugin.call("on_tag").value == "alive"


def test_off_by_default_imports_no_opentelemetry(tmp_path: Path) -> None:
    code = f"""
import sys, json
from pathlib import Path
from pathlib import Path
from wasmext import Host, HostConfig
from wasmext.runtime import Runtime
from wasmext.testing import guest_wat
import wasmtime
host = Host(HostConfig(data_dir=Path({str(tmp_path)!r}), state_backend="memory"),
            runtime=Runtime(cache=False), plugin_dirs=[])
host.add(bytes(wasmtime.wat2wasm(guest_wat(response={{"ok": True, "value": "v"}},
                                             hooks=("on_plain_text",)))), plugin_id="p")
with host.session() as s:
    value = s.on_plain_text("x").value
host.close()
print(json.dumps([value, [m for m in sys.modules if m.startswith("opentelemetry")]]))
"""
    assert _python(code) == ["v", []]


def test_the_host_runs_without_opentelemetry_installed(tmp_path: Path) -> None:
    """With the packages missing: the host works, and switching tracing on says what to
    install."""
    code = f"""
import sys, json
from pathlib import Path
sys.modules["opentelemetry"] = None  # as if wasmext[otel] were not installed
from wasmext import ConfigError, Host, HostConfig
from wasmext.observe.tracing import TracingSettings
from wasmext.runtime import Runtime
from wasmext.testing import guest_wat
import wasmtime
config = HostConfig(data_dir=Path({str(tmp_path)!r}), state_backend="memory")
host = Host(config, runtime=Runtime(cache=False), plugin_dirs=[])
host.add(bytes(wasmtime.wat2wasm(guest_wat(response={{"ok": True, "value": "v"}},
                                             hooks=("on_plain_text",)))), plugin_id="p")
with host.session() as s:
    value = s.on_plain_text("x").value
host.close()
try:
    Host(config, runtime=Runtime(cache=False), plugin_dirs=[],
         tracing=TracingSettings(enabled=True))
    refusal = None
except ConfigError as err:
    refusal = err.message
print(json.dumps([value, refusal]))
"""
    value, refusal = _python(code)
    assert value == "v"
    assert refusal is not None and "wasmext[otel]" in refusal


def _python(code: str) -> Any:
    env = {"PYTHONPATH": f"{ROOT / 'host'}:{ROOT / 'cli'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_tracing_section(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OTLP_TOKEN", "s3cret")
    config = parse_config({"tracing": {
        "enabled": True, "exporter": "otlp-grpc", "endpoint": "http://127.0.0.1:4317",
        "service_name": "edge", "headers": {"authorization": "Bearer ${OTLP_TOKEN}"},
        "sample_ratio": 0.25}})
    assert config.tracing == TracingSettings(True, "otlp-grpc", "http://127.0.0.1:4317",
                                             "edge", {"authorization": "Bearer s3cret"}, 0.25)
    assert "OTLP_TOKEN" in config.credential_env  # no plugin may read the collector's token
    assert parse_config({}).tracing.enabled is False
    with pytest.raises(ConfigError) as info:
        parse_config({"tracing": {"exporter": "zipkin", "sample_ratio": 2, "enabled": "yes",
                                  "colour": 1}})
    message = info.value.message
    for field in ("tracing.exporter", "tracing.sample_ratio", "tracing.enabled",
                  "tracing.colour"):
        assert f"field '{field}'" in message
    with pytest.raises(ConfigError) as refused:
        parse_config({"tracing": {"headers": {"authorization": "${OTLP_TOKEN}"}},
                      "plugin": {"p": {"env": ["OTLP_TOKEN"]}}})
    assert "credential" in refused.value.message


def test_console_exporter_writes_spans_to_stderr(tmp_path: Path) -> None:
    code = f"""
from pathlib import Path
from wasmext import Host, HostConfig
from wasmext.observe.tracing import TracingSettings
from wasmext.runtime import Runtime
host = Host(HostConfig(data_dir=Path({str(tmp_path)!r}), state_backend="memory"),
            runtime=Runtime(cache=False), plugin_dirs=[],
            tracing=TracingSettings(enabled=True, exporter="console", service_name="cons"))
with host.session("console-session"):
    pass
host.close()
print("[]")
"""
    env = {"PYTHONPATH": f"{ROOT / 'host'}:{ROOT / 'cli'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"  # stdout stays the program's
    assert '"name": "wasmext.session"' in out.stderr and "console-session" in out.stderr
    assert '"service.name": "cons"' in out.stderr


def test_otlp_grpc_exporter_reaches_a_grpc_receiver(tmp_path: Path) -> None:
    """otlp-grpc against a real gRPC TraceService on loopback."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    got: list[str] = []

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's name)
            got.extend(s.name for rs in request.resource_spans for ss in rs.scope_spans
                       for s in ss.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        settings = TracingSettings(enabled=True, exporter="otlp-grpc",
                                   endpoint=f"http://127.0.0.1:{port}")
        with Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
                  runtime=Runtime(cache=False), plugin_dirs=[], tracing=settings) as host, \
                host.session():
            pass
        assert got == ["wasmext.session"]  # closing the host sent what was batched
    finally:
        server.stop(None)


def test_tracing_is_process_wide_and_restored(exporter: InMemorySpanExporter,
                                              tmp_path: Path) -> None:
    mine = Tracing.with_exporter(exporter)
    assert tracing.ACTIVE is None
    with Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
              runtime=Runtime(cache=False), plugin_dirs=[], tracing=mine):
        assert tracing.ACTIVE is mine
        # A host with tracing off (the default) leaves the process's tracing alone.
        with Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
                  runtime=Runtime(cache=False), plugin_dirs=[]):
            assert tracing.ACTIVE is mine
    assert tracing.ACTIVE is None


def test_sample_ratio_zero_keeps_no_new_trace_but_follows_a_sampled_caller(
        exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    never = Tracing.with_exporter(exporter, TracingSettings(enabled=True, sample_ratio=0.0))
    with Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
              runtime=Runtime(cache=False), plugin_dirs=[], tracing=never) as host:
        host.add(answering({"ok": True, "value": "v"}), plugin_id="p")
        with host.session() as s:
            assert s.on_plain_text("x").value == "v"
        assert exporter.get_finished_spans() == ()
        # A caller that sampled its trace (flags 01) is followed: the spans are kept.
        caller = never.extract({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})
        with never.span("wasmext.worker pre", parent=caller):
            host.call(host.ordered("on_plain_text")[0], "x")
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["wasmext.hook on_plain_text", "wasmext.worker pre"]
    assert all(format(s.context.trace_id, "032x") == "ab" * 16
               for s in exporter.get_finished_spans())


def test_an_aborted_session_ends_its_span_failed(host: Host,
                                                 exporter: InMemorySpanExporter) -> None:
    from wasmext import HookAborted

    host.add(answering({"ok": False, "error": {"code": "no", "message": "\x1b[31mgo away"}},
                       hook="session_start"), plugin_id="gate", failure="closed")
    with pytest.raises(HookAborted), host.session():
        pass
    hook = by_name(exporter)["wasmext.hook session_start"]
    assert (hook.attributes or {})["wasmext.outcome"] == "aborted"
    assert hook.status.status_code is StatusCode.ERROR
    [session] = [s for s in exporter.get_finished_spans() if s.name == "wasmext.session"]
    assert session.status.status_code is StatusCode.ERROR
    assert session.status.description is not None
    assert "HookAborted" in session.status.description
    assert "\x1b" not in session.status.description


def test_extract_reads_only_bounded_w3c_strings(exporter: InMemorySpanExporter) -> None:
    from opentelemetry import trace

    traced = Tracing.with_exporter(exporter)
    good = f"00-{'ab' * 16}-{'cd' * 8}-01"

    def remote_of(carrier: Any) -> int:
        return trace.get_current_span(traced.extract(carrier)).get_span_context().trace_id

    assert remote_of({"traceparent": good}) == int("ab" * 16, 16)
    assert remote_of({"Traceparent-Evil": good}) == 0
    assert remote_of({"traceparent": good + " " * 600}) == 0  # over the bound: not read
    assert remote_of({"traceparent": b"00-" + b"ab" * 16}) == 0
    assert remote_of({"traceparent": "00-\x1b[2J-" + "f" * 40}) == 0
    assert remote_of(None) == 0
    carrier: dict[str, str] = {}
    with traced.span("outgoing") as span:
        traced.inject(carrier)
    assert carrier["traceparent"].split("-")[2] == format(span.get_span_context().span_id,
                                                          "016x")


def test_a_peers_tracestate_is_kept_only_when_well_formed(
        exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    """The same `extract` reads NATS headers and an MCP request's `_meta`."""
    import logging

    from opentelemetry import trace

    traced = Tracing.with_exporter(exporter)
    parent = f"00-{'ab' * 16}-{'cd' * 8}-01"

    def state_of(tracestate: str) -> dict[str, str]:
        context = traced.extract({"traceparent": parent, "tracestate": tracestate})
        return dict(trace.get_current_span(context).get_span_context().trace_state)

    with caplog.at_level(logging.DEBUG):
        assert state_of("vendor=abc, t@sys=v-1") == {"vendor": "abc", "t@sys": "v-1"}
        for bad in ("a=1,b=\x1b[31mred", "a=1\nFORGED line=x", "a=1,a=2", "A=1",
                    ",".join(f"k{i}=v" for i in range(33))):
            assert state_of(bad) == {}
    assert "\x1b" not in caplog.text and "FORGED" not in caplog.text and "red" not in caplog.text


def test_http_fetch_span_names_the_host_only_and_the_status(
        host: Host, exporter: InMemorySpanExporter, server: Any) -> None:
    url = server.url("/hello?token=s3cret")
    host.add(asking({"op": "http.fetch", "url": url, "method": "GET"}), plugin_id="fetcher",
             grants={"http", "http:127.0.0.1"},
             limits={"timeout_ms": 5000, "host_call_timeout_ms": 5000})
    with host.session() as s:
        s.on_plain_text("x")
    op = by_name(exporter)["wasmext.op http.fetch"]
    attrs = dict(op.attributes or {})
    assert attrs["server.address"] == "127.0.0.1"
    assert attrs["http.request.method"] == "GET"
    assert attrs["http.response.status_code"] == 200
    assert "s3cret" not in repr(attrs)  # the query is not in the span


def test_llm_complete_span_counts_tokens(host: Host, exporter: InMemorySpanExporter) -> None:
    from wasmext.services.llm.client import ChatAnswer, ChatRequest

    def model(request: ChatRequest) -> ChatAnswer:
        return ChatAnswer("a short answer", input_tokens=12, output_tokens=3,
                          model=request.model)

    host.llm.use(model, "tiny")
    host.add(asking({"op": "llm.complete", "max_tokens": 16,
                     "messages": [{"role": "user", "content": "hello there"}]}),
             plugin_id="asker", grants={"llm"}, limits={"timeout_ms": 5000})
    with host.session() as s:
        s.on_plain_text("x")
    attrs = dict(by_name(exporter)["wasmext.op llm.complete"].attributes or {})
    assert attrs["wasmext.outcome"] == "ok", attrs
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (12, 3)


def test_a_collector_that_hangs_never_holds_the_host(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A collector that accepts and never answers: hook calls go on answering, closing
    the host is bounded (not the exporter's retries), and its token is never logged."""
    import logging
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections queue in the backlog; nothing ever answers
    settings = TracingSettings(enabled=True, endpoint=f"http://127.0.0.1:"
                               f"{silent.getsockname()[1]}/v1/traces",
                               headers={"authorization": "Bearer s3cret-token"})
    caplog.set_level(logging.DEBUG)
    try:
        host = Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
                    runtime=Runtime(cache=False), plugin_dirs=[], tracing=settings)
        host.add(answering({"ok": True, "value": "alive"}), plugin_id="healthy")
        started = time.monotonic()
        with host.session() as s:
            for _ in range(50):
                assert s.on_plain_text("x").value == "alive"
        closing = time.monotonic()
        host.close()
        assert time.monotonic() - closing < 8  # two bounded waits of CLOSE_FLUSH_S each
        assert time.monotonic() - started < 20
        assert tracing.ACTIVE is None
    finally:
        silent.close()
    assert "s3cret-token" not in caplog.text


def test_a_missing_header_variable_is_said(monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("NO_SUCH_OTLP_TOKEN", raising=False)
    config = parse_config({"tracing": {"headers": {"x-token": "${NO_SUCH_OTLP_TOKEN}"}}})
    assert config.tracing.headers == {"x-token": ""}
    assert "NO_SUCH_OTLP_TOKEN is not set" in caplog.text
