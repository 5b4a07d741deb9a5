"""A running `wasmext mcp serve` follows `wasmext enable/disable` run by another process
and plugin files changing on disk: the official SDK client hears tools/list_changed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from lc_support import cli, cli_env, module, write_plugin
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from wasmext.files import atomic_write

TIMEOUT = 60


def test_serve_follows_enable_disable_from_another_process(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "kb", "v1", tools=["lookup"])
    write_plugin(plugins, "calc", "v1", tools=["add"])
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    env = cli_env()
    params = StdioServerParameters(command=cli()[0], cwd=str(tmp_path), env=env,
                                   args=cli("mcp", "serve", "--config", str(config))[1:])
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    def run_cli(*args: str) -> None:
        done = subprocess.run(cli(*args, "--config", str(config)), env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr

    async def names(client: Client) -> list[str]:
        return sorted(t.name for t in (await client.list_tools()).tools)

    async def main() -> None:
        nonlocal changed
        async with Client(params, mode="legacy", message_handler=on_message,
                          read_timeout_seconds=TIMEOUT) as client:
            assert await names(client) == ["calc__add", "kb__lookup"]
            await anyio.to_thread.run_sync(run_cli, "disable", "kb")
            await changed.wait()
            assert await names(client) == ["calc__add"]
            called = await client.call_tool("kb__lookup", {"q": "x"})
            assert called.is_error  # its tools are gone, not merely unlisted

            changed = anyio.Event()
            await anyio.to_thread.run_sync(run_cli, "enable", "kb")
            await changed.wait()
            assert await names(client) == ["calc__add", "kb__lookup"]

            changed = anyio.Event()  # a new binary with one more tool: reloaded in place
            atomic_write(plugins / "calc" / "calc.wasm", module("v2", tools=["add", "mul"]))
            await changed.wait()
            assert await names(client) == ["calc__add", "calc__mul", "kb__lookup"]
            ok = await client.call_tool("calc__mul", {"q": "x"})
            assert not ok.is_error and ok.content[0].text == "v2"  # type: ignore[union-attr]

    async def bounded() -> None:
        with anyio.fail_after(TIMEOUT):
            await main()

    anyio.run(bounded)
