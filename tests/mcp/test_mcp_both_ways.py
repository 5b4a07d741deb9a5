"""Both directions at once: an MCP client (the official SDK) calls a C plugin's tool
through `wasmext mcp serve`, and the plugin answers by calling an MCP server's tool
(the official SDK's MCPServer) through tool.call."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from support import ROOT, Built


def test_client_to_plugin_to_mcp_server(built: Built, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    shutil.copytree(built["relay-tools"], plugins / "relay-tools")
    wasm = (plugins / "relay-tools" / "relay-tools.wasm").read_bytes()
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[grants.relay-tools]
digest = "sha256:{hashlib.sha256(wasm).hexdigest()}"
capabilities = ["tools", "tool:calc__*"]
[mcp.servers.calc]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(ROOT / "tests" / "mcp" / "servers" / "calc_server.py"))}]
call_timeout_s = 20
""")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
           "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env=env,
                                   args=["-m", "wasmext_cli", "mcp", "serve", "--config",
                                         str(config)])

    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(params) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert "relay-tools__ask" in names
                result = await client.call_tool("relay-tools__ask", {"question": "ping?"})
                assert not result.is_error, result.content
                assert result.structured_content is not None
                assert result.structured_content["via"] == "calc__echo"
                assert "ping?" in json.dumps(result.structured_content["answer"])
                # 100,000 characters of Unicode, intact through client -> wasmext ->
                # plugin -> tool.call -> server and back.
                payload = "héllo ✓ 𝄞 " * 10_000
                big = await client.call_tool("relay-tools__ask", {"question": payload})
                assert not big.is_error, big.content
                assert big.structured_content is not None
                assert payload in json.dumps(big.structured_content["answer"],
                                             ensure_ascii=False)

    anyio.run(main)


def test_mcp_ls_shows_servers_and_tools(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[mcp.servers.calc]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(ROOT / "tests" / "mcp" / "servers" / "calc_server.py"))}]
[mcp.servers.off]
command = "nothing"
enabled = false
""")
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "mcp", "ls", "--config",
                           str(config), "--json"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    servers = {s["name"]: s for s in json.loads(proc.stdout)}
    assert servers["calc"]["status"] == "connected"
    assert "calc__add" in servers["calc"]["tools"]
    assert servers["off"]["status"] == "disabled"




def test_plugin_manifests_may_ask_for_mcp_servers_with_a_grant(tmp_path: Path) -> None:
    import wasmtime

    from wasmext import HostConfig
    from wasmext.testing import guest_wat, make_host

    folder = tmp_path / "asker"
    folder.mkdir()
    (folder / "asker.wasm").write_bytes(wasmtime.wat2wasm(guest_wat()))
    server = json.dumps(str(ROOT / "tests" / "mcp" / "servers" / "calc_server.py"))
    (folder / "plugin.toml").write_text(f"""id = "asker"
version = "1.0.0"
[mcp.servers.plugcalc]
command = {json.dumps(sys.executable)}
args = [{server}]
""")
    with make_host((folder, {}), config=HostConfig(data_dir=tmp_path)) as denied:
        assert denied.start_mcp() is None
        assert any("without the grant" in e.message for e in denied.load_errors)
    with make_host((folder, {"grants": {"mcp-server:plugcalc"}}),
                   config=HostConfig(data_dir=tmp_path)) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("plugcalc") == "connected"
        assert host.tools.execute("plugcalc__add", {"a": 2, "b": 3})["status"] == "ok"
