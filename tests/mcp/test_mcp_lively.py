"""A server that changes while connected, long calls and cancellation (official Python SDK
both ways): upstream list_changed is followed and forwarded, upstream progress passes
through, and a cancelled call interrupts the plugin or the upstream request."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from interop_support import ROOT, TIMEOUT, run, tool_wat
from mcp.client.client import Client

from wasmext import Host, HostConfig
from wasmext.mcp.config import McpServerConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.testing import make_host

LIVELY = str(ROOT / "tests" / "mcp" / "servers" / "lively_server.py")
# Spins calling a function: wasmtime re-reads the epoch deadline at function entry.
SPIN = tool_wat([{"name": "spin"}], body="(loop $forever (call $tick) (br $forever)) "
                "(i64.const 0)", wat="(func $tick)")
FINE = tool_wat([{"name": "ok"}])


@contextmanager
def lively_host(tmp_path: Path, cancel_file: Path | None = None) -> Iterator[Host]:
    env = {"MCP_CANCEL_FILE": str(cancel_file)} if cancel_file else {}
    server = McpServerConfig("lively", "stdio", sys.executable, (LIVELY,), env,
                             connect_timeout_s=TIMEOUT, call_timeout_s=TIMEOUT)
    limits = {"timeout_ms": 20_000, "fuel_per_call": 10**15}
    with make_host((SPIN, {"plugin_id": "spin", "limits": limits}), (FINE, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     mcp_servers=(server,))) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("lively") == "connected"
        yield host


def test_upstream_list_changed_followed_and_forwarded(tmp_path: Path) -> None:
    with lively_host(tmp_path) as host:
        server = McpToolServer(host, include_mcp_tools=True, poll_interval=0.05)
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        async def main() -> None:
            async with Client(server.server, mode="legacy", message_handler=on_message,
                              read_timeout_seconds=TIMEOUT) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert "lively__grow" in names and "lively__fresh" not in names
                grown = await client.call_tool("lively__grow", {"name": "fresh"})
                assert not grown.is_error, grown.content
                await changed.wait()  # forwarded once the registry followed upstream
                names = {t.name for t in (await client.list_tools()).tools}
                assert "lively__fresh" in names
                fresh = await client.call_tool("lively__fresh", {})
                assert not fresh.is_error
                assert "I am fresh" in str(fresh.content[0])

        run(main)


def cancel_after_first_progress(server: McpToolServer, name: str, args: dict[str, Any],
                                seen: list[tuple[float, float | None, str | None]]) -> None:
    async def main() -> None:
        first = anyio.Event()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, total, message))
            if value > 0 or message == "started":
                first.set()

        async with Client(server.server, mode="legacy", read_timeout_seconds=TIMEOUT) as client:
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool(name, args, progress_callback=progress)
                    pytest.fail("the call was not cancelled")
                tg.start_soon(call)
                await first.wait()
                if name.startswith("lively"):  # wait for a real upstream step too
                    while not any(v >= 1 for v, _t, _m in seen):
                        await anyio.sleep(0.01)
                else:  # let the plugin start spinning
                    await anyio.sleep(0.5)
                tg.cancel_scope.cancel()
            ok = await client.call_tool("fine__ok", {})  # the host still answers
            assert not ok.is_error

    run(main)


def test_cancel_reaches_the_upstream_server_with_progress_passed_through(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cancel_file = tmp_path / "cancelled.txt"
    with lively_host(tmp_path, cancel_file) as host, \
            caplog.at_level(logging.INFO, logger="wasmext.mcp.audit"):
        server = McpToolServer(host, include_mcp_tools=True, poll_interval=0)
        seen: list[tuple[float, float | None, str | None]] = []
        started = time.monotonic()
        cancel_after_first_progress(server, "lively__slow", {"steps": 400, "delay": 0.05},
                                    seen)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not (
                cancel_file.exists() and cancel_file.read_text().strip()):
            time.sleep(0.05)
        assert cancel_file.read_text().strip() == "cancelled"  # the upstream call was stopped
        assert time.monotonic() - started < 400 * 0.05  # long before it would have ended
        assert (1.0, 400.0, "step 1") in seen  # upstream progress, passed through
    lines = [r.getMessage() for r in caplog.records if r.name == "wasmext.mcp.audit"]
    assert any("tool='lively__slow' status=cancelled" in line for line in lines), lines


def test_cancel_interrupts_a_spinning_plugin(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    with make_host((SPIN, {"plugin_id": "spin",
                           "limits": {"timeout_ms": 20_000, "fuel_per_call": 10**15}}),
                   (FINE, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host, \
            caplog.at_level(logging.INFO, logger="wasmext.mcp"):
        server = McpToolServer(host, poll_interval=0)
        started = time.monotonic()
        cancel_after_first_progress(server, "spin__spin", {}, [])
        deadline = time.monotonic() + TIMEOUT
        ended: list[str] = []
        while not ended and time.monotonic() < deadline:
            ended = [r.getMessage() for r in caplog.records
                     if "the cancelled call ended" in r.getMessage()]
            time.sleep(0.05)
        assert ended, "the plugin was not interrupted"
        assert time.monotonic() - started < 15  # its own deadline is 20 s away
        assert host.tools.execute("fine__ok", {})["status"] == "ok"
    audit = [r.getMessage() for r in caplog.records if r.name == "wasmext.mcp.audit"]
    assert any("tool='spin__spin' status=cancelled" in line for line in audit), audit
