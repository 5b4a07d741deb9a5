"""`wasmext mcp serve` with the host's instance pool full (`[host] instance_pool`,
sandbox.engine): the client's tool call is an error naming the host's limit, bounded,
without the plugin's settings; the server goes on serving, and the tool answers once a
slot is free."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
from mcp.client.client import Client

from wasmext.config import HostConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import guest_wat, make_host

TOOLBOX = guest_wat(response={"ok": True, "value": {"shouted": "HI"}}, registration={
    "hooks": [{"hook": "on_tool"}],
    "tools": [{"name": "shout", "description": "Shouts", "input_schema": {"type": "object"}}]})
SECRET = "tok-7f3a9c-never-shown"


def test_a_full_pool_is_a_named_tool_error_and_the_server_serves_on(tmp_path: Path) -> None:
    config = HostConfig(data_dir=tmp_path, state_backend="memory", instance_pool=2)
    with make_host((TOOLBOX, {"plugin_id": "toolbox", "settings": {"token": SECRET}}),
                   config=config) as host:
        plugin = host.plugins["toolbox"].plugin
        assert isinstance(plugin, Plugin)
        plugin.close()  # its idle instance goes: a call needs a new one
        held = [plugin.new_instance() for _ in range(2)]

        async def calls() -> list[tuple[bool, str, float]]:
            async with Client(McpToolServer(host, poll_interval=0).server,
                              read_timeout_seconds=30) as client:
                outcomes = []
                for n in range(3):
                    if n == 2:
                        held.clear()  # slots come free: the next call answers
                    started = time.monotonic()
                    result = await client.call_tool("toolbox__shout", {})
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    outcomes.append((result.is_error, text, time.monotonic() - started))
                assert [t.name for t in (await client.list_tools()).tools] == \
                    ["toolbox__shout"]
                return outcomes

        outcomes: Any = anyio.run(calls)
    for is_error, text, took in outcomes[:2]:
        assert is_error and took < 5
        assert "instance pool full" in text and "instance_pool" in text, text
        assert SECRET not in text and len(text) < 2000
    assert outcomes[2][0] is False and "HI" in outcomes[2][1]
