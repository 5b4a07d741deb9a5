"""Disabling a plugin stops the MCP servers its manifest asked for and removes their tools;
enabling it again (a rescan) starts them again."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from lc_support import ROOT, module

from wasmext import Host
from wasmext.files import atomic_write


def _processes_running(marker: str) -> int:
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes().decode(errors="replace"):
                count += 1
        except OSError:
            continue
    return count


def test_disable_stops_the_plugins_own_mcp_servers(tmp_path: Path) -> None:
    server = tmp_path / "own_calc_server.py"
    shutil.copy(ROOT / "tests" / "mcp" / "servers" / "calc_server.py", server)
    folder = tmp_path / "plugins" / "asker"
    folder.mkdir(parents=True)
    atomic_write(folder / "asker.wasm", module("v1"))
    (folder / "plugin.toml").write_text(f"""id = "asker"
version = "1.0.0"
[mcp.servers.plugcalc]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(server))}]
""")
    import hashlib
    digest = "sha256:" + hashlib.sha256(module("v1")).hexdigest()
    # An mcp-server grant pins the manifest that names the server's command.
    manifest = "sha256:" + hashlib.sha256((folder / "plugin.toml").read_bytes()).hexdigest()
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[grants.asker]
digest = "{digest}"
manifest = "{manifest}"
capabilities = ["mcp-server:plugcalc"]
""")
    from wasmext import load_config

    with Host(load_config(config)) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("plugcalc") == "connected"
        assert host.tools.execute("plugcalc__add", {"a": 2, "b": 3})["status"] == "ok"
        assert _processes_running(str(server)) == 1

        host.disable("asker")
        assert not any(n.startswith("plugcalc__") for n in host.tools.tools)
        assert host.tools.execute("plugcalc__add", {"a": 2, "b": 3})["status"] == "error"
        assert all(s["name"] != "plugcalc" for s in clients.servers())
        deadline = time.monotonic() + 10
        while _processes_running(str(server)):
            assert time.monotonic() < deadline, "the plugin's MCP server still runs"
            time.sleep(0.05)

        host.enable("asker")
        assert host.rescan().added == ["asker"]
        assert clients.status("plugcalc") == "connected"
        assert host.tools.execute("plugcalc__add", {"a": 2, "b": 3})["status"] == "ok"


def test_disable_leaves_a_configured_server_of_the_same_name_alone(tmp_path: Path) -> None:
    server = json.dumps(str(ROOT / "tests" / "mcp" / "servers" / "calc_server.py"))
    folder = tmp_path / "plugins" / "asker"
    folder.mkdir(parents=True)
    atomic_write(folder / "asker.wasm", module("v1"))
    (folder / "plugin.toml").write_text(f"""id = "asker"
version = "1.0.0"
[mcp.servers.calc]
command = {json.dumps(sys.executable)}
args = [{server}]
""")
    import hashlib
    digest = "sha256:" + hashlib.sha256(module("v1")).hexdigest()
    # An mcp-server grant pins the manifest that names the server's command.
    manifest = "sha256:" + hashlib.sha256((folder / "plugin.toml").read_bytes()).hexdigest()
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[grants.asker]
digest = "{digest}"
manifest = "{manifest}"
capabilities = ["mcp-server:calc"]
[mcp.servers.calc]
command = {json.dumps(sys.executable)}
args = [{server}]
""")
    from wasmext import load_config

    with Host(load_config(config)) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("calc") == "connected"
        assert any("is taken" in e.message for e in host.load_errors)
        host.disable("asker")  # the configured server is not the plugin's to stop
        assert clients.status("calc") == "connected"
        assert host.tools.execute("calc__add", {"a": 2, "b": 3})["status"] == "ok"
