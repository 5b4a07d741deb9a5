"""W3C trace context over MCP `_meta`: wasmext's client sends it with tools/call, and
`wasmext mcp serve` puts a call's spans under the trace a client sent."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wasmext import Host, HostConfig
from wasmext.mcp.client.catalog import get_prompt, read_resource
from wasmext.mcp.client.connections import McpClients
from wasmext.mcp.client.spec import ServerSpec
from wasmext.mcp.server.serve import McpToolServer
from wasmext.observe.tracing import Tracing
from wasmext.runtime import Runtime

SERVERS = Path(__file__).parent / "servers"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def host(exporter: InMemorySpanExporter, tmp_path: Path) -> Iterator[Host]:
    with Host(HostConfig(data_dir=tmp_path, state_backend="memory"),
              runtime=Runtime(cache=False), plugin_dirs=[],
              tracing=Tracing.with_exporter(exporter)) as h:
        yield h


def test_served_tool_call_joins_the_clients_trace(host: Host,
                                                  exporter: InMemorySpanExporter) -> None:
    host.tools.register_python("echo", lambda args: args)
    server = McpToolServer(host, include_host_tools=True, poll_interval=0)

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(server.server) as client:
                result = await client.call_tool(
                    "echo", {"v": 1}, meta={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
                assert result.structured_content == {"v": 1}
                # No trace context: the call's spans start a trace of their own.
                assert not (await client.call_tool("echo", {"v": 2})).is_error

    anyio.run(main)
    served = [s for s in exporter.get_finished_spans()
              if s.name == "wasmext.mcp.serve tools/call"]
    assert len(served) == 2
    joined, alone = served
    assert format(joined.context.trace_id, "032x") == TRACE_ID
    assert joined.parent is not None and format(joined.parent.span_id, "016x") == PARENT_ID
    assert alone.parent is None and format(alone.context.trace_id, "032x") != TRACE_ID
    assert (joined.attributes or {})["wasmext.tool"] == "echo"
    # The session the call ran in is a child of the served span.
    sessions = [s for s in exporter.get_finished_spans() if s.name == "wasmext.session"
                and s.parent is not None and s.parent.span_id == joined.context.span_id]
    assert len(sessions) == 1


def test_a_malformed_traceparent_starts_a_new_trace(host: Host,
                                                    exporter: InMemorySpanExporter) -> None:
    host.tools.register_python("echo", lambda args: args)
    server = McpToolServer(host, include_host_tools=True, poll_interval=0)

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(server.server) as client:
                result = await client.call_tool(
                    "echo", {"v": 1}, meta={"traceparent": "00-\x1b[2J" + "f" * 5000})
                assert result.structured_content == {"v": 1}

    anyio.run(main)
    [served] = [s for s in exporter.get_finished_spans()
                if s.name == "wasmext.mcp.serve tools/call"]
    assert served.parent is None


def test_a_hostile_tracestate_in_meta_is_dropped_and_never_logged(
        host: Host, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    host.tools.register_python("echo", lambda args: args)
    server = McpToolServer(host, include_host_tools=True, poll_interval=0)
    # The MCP SDK's own middleware parses `_meta` with OpenTelemetry too, baggage included.
    meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "tracestate": "ok=1,x=\x1b[2J\nFORGED wasmext: approved",
            "baggage": "k=\x1b]0;title\x07\nFORGED baggage line"}

    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(server.server) as client:
                result = await client.call_tool("echo", {"v": 1}, meta=meta)
                assert result.structured_content == {"v": 1}
                assert (await client.call_tool("echo", {"v": 2})).structured_content == \
                    {"v": 2}

    with caplog.at_level(logging.DEBUG):
        anyio.run(main)
    served = [s for s in exporter.get_finished_spans()
              if s.name == "wasmext.mcp.serve tools/call"]
    assert format(served[0].context.trace_id, "032x") == TRACE_ID
    assert len(served[0].context.trace_state) == 0
    # What OpenTelemetry logs of the peer's text is one inert line: no escape, no line
    # of the peer's own.
    assert "\x1b" not in caplog.text and "\x07" not in caplog.text
    assert all(not line.startswith("FORGED") for line in caplog.text.splitlines())


def test_client_sends_trace_context_in_meta(host: Host,
                                            exporter: InMemorySpanExporter) -> None:
    clients = McpClients(host.tools)
    try:
        clients.start([ServerSpec("meta", "stdio", command=sys.executable,
                                  args=(str(SERVERS / "meta_server.py"),))])
        assert clients.status("meta") == "connected"
        assert host.tracing is not None
        with host.tracing.span("app.turn"):
            result = host.tools.call("meta__show_meta", {})
        assert result["status"] == "ok", result
        sent: dict[str, Any] = json.loads(result["output"])
        with host.tracing.span("app.read") as reading:
            [block] = read_resource(clients, "meta", "meta://show/x")
            prompt = get_prompt(clients, "meta", "show_meta_prompt")
        read_parent = format(reading.get_span_context().span_id, "016x")
        for answer in (block["text"], prompt["messages"][0]["content"]["text"]):
            assert json.loads(answer)["traceparent"].split("-")[2] == read_parent
    finally:
        clients.stop()
    [call] = [s for s in exporter.get_finished_spans() if s.name == "wasmext.mcp tools/call"]
    app = next(s for s in exporter.get_finished_spans() if s.name == "app.turn")
    version, trace_id, span_id, flags = sent["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert trace_id == format(app.context.trace_id, "032x")
    assert span_id == format(call.context.span_id, "016x")  # the server's parent: our call
    assert call.parent is not None and call.parent.span_id == app.context.span_id
    assert (call.attributes or {})["wasmext.mcp_server"] == "meta"
    assert (call.attributes or {})["wasmext.tool"] == "show_meta"
