"""Tracing across hosts: a caller's remote stage and the worker that ran it in one trace,
the W3C trace context carried in the NATS request's headers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import PYTHONPATH, wat_plugin
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wasmext import Host, HostConfig
from wasmext.cluster.contract import CallIds
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.worker import Worker
from wasmext.observe.otlp_receiver import ReceivedSpan, otlp_receiver
from wasmext.observe.tracing import Tracing
from wasmext.runtime import Runtime

PREFIX = "traced"


def stamp_folder(parent: Path) -> Path:
    plugins = parent / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped",
                                                     "metadata": {"pre": True}}})
    return plugins


def tracing_table(endpoint: str, service: str) -> str:
    return (f'[tracing]\nenabled = true\nexporter = "otlp-http"\nendpoint = "{endpoint}"\n'
            f'service_name = "{service}"\n')


@pytest.mark.slow  # two Python processes start and export: several seconds by design
def test_caller_and_worker_processes_share_one_trace(nats_url: str, spawn: Any,
                                                      tmp_path: Path) -> None:
    plugins = stamp_folder(tmp_path)
    with otlp_receiver() as receiver:
        worker_toml = tmp_path / "worker.toml"
        worker_toml.write_text(f'[host]\ndata_dir = "{tmp_path / "worker-data"}"\n'
                               + tracing_table(receiver.endpoint, "the-worker"))
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"  # the children export within 0.1 s
        try:
            worker = spawn("worker", "worker", "--nats", nats_url, "--config",
                           str(worker_toml), "--plugins", str(plugins), "--prefix", PREFIX,
                           "--name", "traced-worker", "--no-watch").wait_ready()
        finally:
            del os.environ["OTEL_BSP_SCHEDULE_DELAY"]
        subject = re.search(rb"serving pre stamp on (\S+)", worker.log_path.read_bytes())
        assert subject is not None
        caller_toml = tmp_path / "caller.toml"
        caller_toml.write_text(
            f'[host]\ndata_dir = "{tmp_path / "caller-data"}"\n'
            f'[extensions.remote-stamp]\ntype = "pre"\nsubject = "{subject.group(1).decode()}"\n'
            'timeout_ms = 5000\n' + tracing_table(receiver.endpoint, "the-caller"))
        policy = tmp_path / "policy.toml"
        policy.write_text('policy_id = "traced"\n[[pre]]\nid = "remote-stamp"\n'
                          'mode = "required"\n')
        transcript = tmp_path / "transcript.json"
        transcript.write_text(json.dumps({"model": "replay", "turns": [
            {"user": "hello there", "steps": [{"response": "hi"}]}]}))
        proc = subprocess.run(
            [sys.executable, "-m", "wasmext_cli", "run", str(transcript), "--config",
             str(caller_toml), "--policy", str(policy), "--nats", nats_url, "--json"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": PYTHONPATH})
        assert proc.returncode == 0, proc.stderr

        def both(spans: list[ReceivedSpan]) -> bool:
            return any(s.name == "wasmext.remote pre" for s in spans) and \
                any(s.name == "wasmext.worker pre" for s in spans)

        spans = receiver.wait_for(both)
        remote = next(s for s in spans if s.name == "wasmext.remote pre")
        served = next(s for s in spans if s.name == "wasmext.worker pre")
        # Two processes, one trace: the worker's span is a child of the caller's.
        assert (remote.service, served.service) == ("the-caller", "the-worker")
        assert served.trace_id == remote.trace_id
        assert served.parent_span_id == remote.span_id
        assert remote.attributes["wasmext.extension"] == "remote-stamp"
        assert remote.attributes["wasmext.outcome"] == "ok"
        # The caller's span sits in its session's trace; the plugin's hook span in the
        # worker is a child of the worker's span.
        session = next(s for s in spans if s.name == "wasmext.session"
                       and s.service == "the-caller")
        assert session.trace_id == remote.trace_id and session.parent_span_id == ""
        assert f"trace: {session.trace_id}" in proc.stderr  # `wasmext run` names it
        hook = receiver.wait_for(lambda got: any(
            s.name == "wasmext.hook pre" and s.parent_span_id == served.span_id for s in got))
        assert next(s for s in hook if s.name == "wasmext.hook pre"
                    and s.parent_span_id == served.span_id).attributes[
                        "wasmext.plugin_id"] == "stamp"
        assert worker.signal(15) == 0  # drains and exits cleanly with tracing on


@pytest.fixture
def traced() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Tracing.with_exporter(exporter), exporter


def test_remote_call_in_process_carries_traceparent(nats_url: str, tmp_path: Path,
                                                    traced: tuple[Tracing, Any]) -> None:
    """One process, a real nats-server: the worker span's parent is the remote call's
    span, read from the traceparent header (in-memory exporter: the span shapes)."""
    import asyncio
    import threading

    tracing, exporter = traced
    plugins = stamp_folder(tmp_path)
    with Host(HostConfig(data_dir=tmp_path / "d"), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)], tracing=tracing) as host:
        worker = Worker(host, nats_url, prefix="inproc", name="w-inproc")
        subject = worker.stages["stamp"][0].subject
        loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            await worker.start()
            started.set()
            while not stopping.is_set():
                await asyncio.sleep(0.02)
            await worker.drain()

        stopping = threading.Event()
        thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
        thread.start()
        try:
            assert started.wait(15)
            registry = parse_registry({"remote-stamp": {"type": "pre", "subject": subject,
                                                        "timeout_ms": 5000}})
            with NatsLink(nats_url, name="caller") as link:
                caller = RemoteCaller(registry, link)
                ids = CallIds("t-1", "default", time.monotonic() + 5, None)
                with tracing.span("app.request") as app:
                    _, error = caller.call(registry["remote-stamp"],
                                                {"message": {"payload": "x", "metadata": {}},
                                                 "context": {}}, ids)
                assert error is None, error
        finally:
            stopping.set()
            thread.join(15)
            loop.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    remote, served = spans["wasmext.remote pre"], spans["wasmext.worker pre"]
    hook = spans["wasmext.hook pre"]
    assert remote.parent is not None and remote.parent.span_id == app.get_span_context().span_id
    assert served.parent is not None and served.parent.span_id == remote.context.span_id
    assert served.parent.is_remote  # it came over the wire, not from this thread
    assert served.context.trace_id == remote.context.trace_id
    assert hook.parent is not None and hook.parent.span_id == served.context.span_id
    assert served.attributes["wasmext.plugin_id"] == "stamp"
    assert served.attributes["messaging.destination.name"] == subject


class _HostileHeaders:
    """A NATS link whose requests carry a hostile peer's W3C headers."""

    def __init__(self, link: NatsLink, headers: dict[str, str]) -> None:
        self.link, self.extra = link, headers

    def request(self, subject: str, data: bytes, headers: dict[str, str],
                timeout_s: float) -> Any:
        return self.link.request(subject, data, {**headers, **self.extra}, timeout_s)


def test_a_hostile_tracestate_is_dropped_without_reaching_the_logs(
        nats_url: str, tmp_path: Path, traced: tuple[Tracing, Any],
        caplog: pytest.LogCaptureFixture) -> None:
    """A NATS client's tracestate with an escape sequence and a forged log line: the
    worker follows the valid traceparent, drops the tracestate, and logs nothing of it
    (OpenTelemetry's own parser would log the member raw)."""
    import asyncio
    import logging
    import threading

    tracing, exporter = traced
    plugins = stamp_folder(tmp_path)
    trace_id = "ab" * 16
    hostile = {"traceparent": f"00-{trace_id}-{'cd' * 8}-01",
               "tracestate": "ok=1,x=\x1b[2J\nFORGED wasmext: all plugins approved,ok2=2"}
    with caplog.at_level(logging.DEBUG), Host(
            HostConfig(data_dir=tmp_path / "d"), runtime=Runtime(cache=False),
            plugin_dirs=[("workspace", plugins)], tracing=tracing) as host:
        worker = Worker(host, nats_url, prefix="hostile", name="w-hostile")
        subject = worker.stages["stamp"][0].subject
        loop = asyncio.new_event_loop()
        started, stopping = threading.Event(), threading.Event()

        async def serve() -> None:
            await worker.start()
            started.set()
            while not stopping.is_set():
                await asyncio.sleep(0.02)
            await worker.drain()

        thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
        thread.start()
        try:
            assert started.wait(15)
            registry = parse_registry({"remote-stamp": {"type": "pre", "subject": subject,
                                                        "timeout_ms": 5000}})
            data = {"message": {"payload": "x", "metadata": {}}, "context": {}}
            with NatsLink(nats_url, name="hostile-caller") as link:
                for extra in (hostile, {}):  # the hostile request, then a plain one
                    caller = RemoteCaller(registry, _HostileHeaders(link, extra))  # type: ignore[arg-type]
                    began = time.monotonic()
                    answer, error = caller.call(
                        registry["remote-stamp"], data,
                        CallIds("t-2", "default", time.monotonic() + 5, None))
                    assert time.monotonic() - began < 5
                    assert error is None, error
                    assert answer["message"]["payload"] == "stamped"
        finally:
            stopping.set()
            thread.join(15)
            loop.close()
    served = [s for s in exporter.get_finished_spans() if s.name == "wasmext.worker pre"]
    assert len(served) == 2
    assert served[0].context.trace_id == int(trace_id, 16)  # the traceparent was followed
    assert len(served[0].context.trace_state) == 0
    assert "\x1b" not in caplog.text and "FORGED" not in caplog.text
