"""How wasmext connects to MCP servers: headers with ${VAR} (an HTTP server behind a
bearer token: wasmext's own `mcp serve --http`), and manifest servers whose relative
paths resolve from the plugin's folder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import wasmtime
from interop_support import FINE, ROOT, TIMEOUT, served_http

from wasmext import HostConfig
from wasmext.config import load_config
from wasmext.testing import guest_wat, make_host

TOKEN = "upstream-token-0123456789"


def test_headers_with_env_substitution_reach_an_authenticated_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_TOKEN", TOKEN)
    with make_host((FINE, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / "up")) as upstream, \
            served_http(upstream, token=TOKEN) as url:
        for name, header in (("good", "Bearer ${UPSTREAM_TOKEN}"), ("bad", "Bearer nope")):
            config = tmp_path / f"{name}.toml"
            config.write_text(f"""
[host]
data_dir = "{tmp_path / name}"
[mcp.servers.up]
transport = "http"
url = {json.dumps(url)}
headers = {{ Authorization = {json.dumps(header)} }}
connect_timeout_s = {TIMEOUT}
""")
            cfg = load_config(config)
            assert cfg.mcp_servers[0].headers["Authorization"] == header.replace(
                "${UPSTREAM_TOKEN}", TOKEN)
            with make_host(config=cfg) as host:
                clients = host.start_mcp()
                assert clients is not None
                if name == "good":
                    assert clients.status("up") == "connected", clients.status("up")
                    answer = host.tools.execute("up__fine__lookup", {"q": "x"})
                    assert answer == {"status": "ok", "output": {"found": 1}}
                else:
                    assert clients.status("up").startswith("unavailable")
                    assert "up__fine__lookup" not in host.tools.tools


def test_manifest_server_paths_resolve_from_the_plugin_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "plugins" / "asker"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "mcp" / "servers" / "calc_server.py", folder / "server.py")
    (folder / "asker.wasm").write_bytes(wasmtime.wat2wasm(guest_wat()))
    (folder / "plugin.toml").write_text(f"""id = "asker"
version = "1.0.0"
[mcp.servers.mine]
command = {json.dumps(sys.executable)}
args = ["server.py"]
""")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the plugin's folder
    with make_host((folder, {"grants": {"mcp-server:mine"}}),
                   config=HostConfig(data_dir=tmp_path / "data")) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("mine") == "connected"
        assert host.tools.execute("mine__add", {"a": 2, "b": 3})["status"] == "ok"
