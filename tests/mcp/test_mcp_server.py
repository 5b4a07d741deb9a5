"""MCP server (out): the official SDK client against `wasmext mcp serve` and serve_http."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import wasmtime
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from support import free_port
from wasmext import HostConfig
from wasmext.mcp.server.serve import McpToolServer, RateLimiter, build_http_server
from wasmext.testing import guest_wat, make_host

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
TIMEOUT = 30


def tool_wat(tools: list[dict[str, Any]], body: str | None = None) -> str:
    return guest_wat(body, response={"ok": True, "value": {"found": 1}},
                     registration={"hooks": [{"hook": "on_tool"}], "tools": tools})


KB = tool_wat([{"name": "lookup", "description": "Find it", "input_schema": SCHEMA}])
BOOM = tool_wat([{"name": "explode"}], body="unreachable")


def write_plugin(parent: Path, pid: str, wat: str) -> None:
    folder = parent / pid
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\nabi = 1\n')
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))


def run(fn: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(TIMEOUT):
            await fn()
    anyio.run(bounded)


async def check_list_and_calls(client: Client) -> None:
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"kb__lookup", "boom__explode"}
    assert listed["kb__lookup"].input_schema["required"] == ["q"]
    assert listed["kb__lookup"].description == "Find it"

    ok = await client.call_tool("kb__lookup", {"q": "x"})
    assert not ok.is_error
    assert isinstance(ok.content[0], types.TextContent)
    assert ok.content[0].text == '{"found": 1}'
    assert ok.structured_content == {"found": 1}

    bad = await client.call_tool("kb__lookup", {"q": 5})  # a tool error, not a protocol error
    assert bad.is_error
    assert isinstance(bad.content[0], types.TextContent)
    assert bad.content[0].text.startswith("invalid: invalid arguments")

    trapped = await client.call_tool("boom__explode", {})
    assert trapped.is_error
    missing = await client.call_tool("nope__nothing", {})
    assert missing.is_error


def test_stdio_server_process(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "kb", KB)
    write_plugin(plugins, "boom", BOOM)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=env,
                                   args=["-m", "wasmext_cli", "mcp", "serve", "--plugins",
                                         str(plugins)])

    async def main() -> None:
        for mode in ("auto", "legacy"):
            async with Client(params, mode=mode, read_timeout_seconds=TIMEOUT) as client:
                await check_list_and_calls(client)

    run(main)


@pytest.fixture
def http_host(tmp_path: Path) -> Iterator[tuple[Any, str]]:
    config = HostConfig(data_dir=tmp_path / ".wasmext")
    with make_host((KB, {"plugin_id": "kb"}), (BOOM, {"plugin_id": "boom"}),
                   config=config) as host:
        port = free_port()
        server = build_http_server(host, "127.0.0.1", port, poll_interval=0.05)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started = threading.Event()

        def wait_started() -> None:
            for _ in range(TIMEOUT * 100):
                if server.started or not thread.is_alive():
                    break
                started.wait(0.01)
        wait_started()
        assert server.started
        try:
            yield host, f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True
            thread.join(TIMEOUT)


def test_streamable_http_lists_and_calls(http_host: tuple[Any, str],
                                         caplog: pytest.LogCaptureFixture) -> None:
    _host, url = http_host

    async def main() -> None:
        for mode in ("auto", "legacy"):
            async with Client(url, mode=mode, read_timeout_seconds=TIMEOUT) as client:
                await check_list_and_calls(client)

    with caplog.at_level(logging.INFO, logger="wasmext.mcp.audit"):
        run(main)
    lines = [r.getMessage() for r in caplog.records if r.name == "wasmext.mcp.audit"]
    assert any("tool='kb__lookup' status=ok" in line for line in lines)
    assert any("status=error code=invalid" in line for line in lines)
    assert all('"x"' not in line and "'x'" not in line for line in lines)  # no argument values


def test_list_changed_on_disable_and_add(http_host: tuple[Any, str]) -> None:
    host, url = http_host
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def main() -> None:
        nonlocal changed
        async with Client(url, mode="legacy", message_handler=on_message,
                          read_timeout_seconds=TIMEOUT) as client:
            assert len((await client.list_tools()).tools) == 2
            await anyio.to_thread.run_sync(host.disable, "boom")
            await changed.wait()
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["kb__lookup"]
            changed = anyio.Event()
            wasm = bytes(wasmtime.wat2wasm(tool_wat([{"name": "more"}])))
            await anyio.to_thread.run_sync(lambda: host.add(wasm, plugin_id="extra"))
            await changed.wait()
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["extra__more", "kb__lookup"]

        async with Client(url, read_timeout_seconds=TIMEOUT) as modern, \
                modern.listen(tools_list_changed=True) as sub:
            await anyio.to_thread.run_sync(host.disable, "extra")
            async for _event in sub:
                break
            names = [t.name for t in (await modern.list_tools()).tools]
            assert names == ["kb__lookup"]

    run(main)


def test_rate_limit_and_host_tools() -> None:
    limiter = RateLimiter(rate=20, burst=2)
    assert limiter.allow("a", 0.0) and limiter.allow("a", 0.0)
    assert not limiter.allow("a", 0.0)
    assert limiter.allow("b", 0.0)  # per client
    assert limiter.allow("a", 0.05)  # refilled at 20/s

    with make_host((KB, {"plugin_id": "kb"})) as host:
        host.tools.register_python("echo", lambda a: a, input_schema={"type": "object"})
        plain = McpToolServer(host, rate=1, burst=1, poll_interval=0)
        everything = McpToolServer(host, include_host_tools=True, poll_interval=0)

        async def main() -> None:
            async with Client(plain.server, read_timeout_seconds=TIMEOUT) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["kb__lookup"]
                assert not (await client.call_tool("kb__lookup", {"q": "x"})).is_error
                limited = await client.call_tool("kb__lookup", {"q": "x"})
                assert limited.is_error
                assert isinstance(limited.content[0], types.TextContent)
                assert "rate limited" in limited.content[0].text
            async with Client(everything.server, read_timeout_seconds=TIMEOUT) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["echo",
                                                                                "kb__lookup"]
                echoed = await client.call_tool("echo", {"v": 1})
                assert echoed.structured_content == {"v": 1}

        run(main)


def test_progress_start_and_end() -> None:
    with make_host((KB, {"plugin_id": "kb"})) as host:
        server = McpToolServer(host, poll_interval=0)
        seen: list[tuple[float, str | None]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, message))

        async def main() -> None:
            async with Client(server.server, mode="legacy",
                              read_timeout_seconds=TIMEOUT) as client:
                result = await client.call_tool("kb__lookup", {"q": "x"},
                                                progress_callback=progress)
                assert not result.is_error

        run(main)
        assert seen[0] == (0.0, "started")
        assert seen[-1] == (1.0, "ok")
