"""Runtime management over MCP, in one process (docs/mcp-manage.md).

    wasmext build plugins/relay-tools && python docs/manage_example.py

An MCP client loads the relay-tools plugin from the folder the operator allows;
its tool runs but is denied what it asks for until the operator grants it with
`wasmext grant`. `wasmext mcp serve --manage` does the same over stdio or HTTP,
and its watcher picks the grant up without the `rescan()` written here.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from mcp.client.client import Client

from wasmext import Host, load_config
from wasmext.mcp.server.serve import McpToolServer

RELAY = Path(__file__).resolve().parent.parent / "plugins" / "relay-tools"

site = Path(tempfile.mkdtemp())
(site / "wasmext.toml").write_text("""
[host]
data_dir = ".wasmext"
[plugins]
workspace_dir = "plugins"      # where a load installs
[manage]
enabled = true
sources = ["incoming"]         # the only folder a client may load from
""")
shutil.copytree(RELAY, site / "incoming" / "relay-tools",
                ignore=shutil.ignore_patterns("src", ".*"))
config = load_config(site / "wasmext.toml")


def operator_grants() -> None:
    """What the operator types; an MCP client has no tool for it."""
    subprocess.run([sys.executable, "-m", "wasmext_cli", "grant", "relay-tools", "tools",
                    "tool:calc__echo", "--config", str(site / "wasmext.toml")], check=True,
                   stdout=subprocess.DEVNULL)


async def main(host: Host) -> None:
    server = McpToolServer(host, manage=config.manage, poll_interval=0)
    async with Client(server.server) as client:
        loaded = await client.call_tool("wasmext_plugin_load", {"path": "relay-tools"})
        print("loaded:", loaded.structured_content)
        asked = await client.call_tool("relay-tools__ask", {"question": "hi"})
        print("before the grant:", asked.content[0].text)  # type: ignore[union-attr]
        grants = await client.call_tool("wasmext_plugin_grants", {"id": "relay-tools"})
        print("grants:", json.dumps(grants.structured_content))

        await anyio.to_thread.run_sync(operator_grants)
        await anyio.to_thread.run_sync(host.rescan)  # `mcp serve` watches approvals.json
        asked = await client.call_tool("relay-tools__ask", {"question": "hi"})
        print("after the grant:", asked.content[0].text)  # type: ignore[union-attr]


with Host(config) as host:
    host.tools.register_python("calc__echo", lambda args: args["text"],
                               description="Echo the text (stands for an MCP server's tool)")
    anyio.run(main, host)
shutil.rmtree(site)
