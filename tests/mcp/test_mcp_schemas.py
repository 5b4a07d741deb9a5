"""Items that broke third-party clients, checked with the official Python SDK: tools with
non-object schemas are refused at registration (plugin named, the rest still served),
error results are text only, and every transport advertises tools.listChanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
from interop_support import (
    FINE,
    MIXED,
    TIMEOUT,
    cli_args,
    cli_env,
    run,
    served_http,
    tool_wat,
    write_plugin,
)
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from wasmext import HostConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.testing import make_host


async def check_mixed(client: Client) -> None:
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"mixed__good", "fine__lookup"}
    good = listed["mixed__good"]
    assert good.output_schema is not None and good.output_schema["type"] == "object"

    ok = await client.call_tool("mixed__good", {"q": "x"})
    assert not ok.is_error
    assert ok.structured_content == {"found": 1}

    bad = await client.call_tool("mixed__good", {"q": 5})
    assert bad.is_error
    assert bad.structured_content is None  # text only: no outputSchema mismatch
    assert isinstance(bad.content[0], types.TextContent)
    assert bad.content[0].text.startswith("invalid: invalid arguments")


def test_non_object_schemas_refused_naming_the_plugin(tmp_path: Path) -> None:
    config = HostConfig(data_dir=tmp_path / ".wasmext")
    fine = tool_wat([{"name": "lookup", "description": "Find it"},
                     {"name": "hinted", "annotations": {"readOnlyHint": "yes"}}])
    with make_host((MIXED, {"plugin_id": "mixed"}), (fine, {"plugin_id": "fine"}),
                   config=config) as host:
        problems = [e.message for e in host.load_errors]
        assert any("plugin mixed tools[1]" in p and "input_schema must be an object" in p
                   for p in problems), problems
        assert any("plugin mixed tools[2]" in p and "output_schema must be an object" in p
                   for p in problems), problems
        assert any("plugin fine tools[1]" in p and "'annotations' holds only" in p
                   for p in problems), problems
        assert "mixed__good" in host.tools.tools
        assert "mixed__stringly" not in host.tools.tools
        # A host tool with a scalar schema is never served either (it would break the list).
        host.tools.register_python("scalar", lambda a: a, input_schema={"type": "string"})
        server = McpToolServer(host, include_host_tools=True, poll_interval=0)

        async def main() -> None:
            async with Client(server.server, read_timeout_seconds=TIMEOUT) as client:
                await check_mixed(client)

        run(main)


def test_http_and_stdio_advertise_list_changed(tmp_path: Path) -> None:
    config = HostConfig(data_dir=tmp_path / ".wasmext")
    seen: list[Any] = []

    async def capture(client: Client) -> None:
        caps = client.server_capabilities
        assert caps.tools is not None
        seen.append(caps.tools.list_changed)
        await check_mixed(client)

    with make_host((MIXED, {"plugin_id": "mixed"}), (FINE, {"plugin_id": "fine"}),
                   config=config) as host, served_http(host) as url:
        async def over_http() -> None:
            async with Client(url, mode="legacy", read_timeout_seconds=TIMEOUT) as client:
                await capture(client)
        run(over_http)

    plugins = tmp_path / "plugins"
    write_plugin(plugins, "mixed", MIXED)
    write_plugin(plugins, "fine", FINE)
    params = StdioServerParameters(command=cli_args()[0], cwd=str(tmp_path), env=cli_env(),
                                   args=[*cli_args("mcp", "serve", "--plugins",
                                                   str(plugins))[1:]])

    async def over_stdio() -> None:
        async with Client(params, mode="legacy", read_timeout_seconds=TIMEOUT) as client:
            await capture(client)
    run(over_stdio)
    assert seen == [True, True]
