"""Two plugins granted the same MCP server name: which one ran it followed load order
(the first loaded won, and a reload or rescan could change the winner). Now a name that
more than one loaded plugin is granted (and asks for) is contested: none of them runs
it, each has a ConfigError naming all of them, in any load order; when all but one have
gone, the last one's server starts, as a fresh start would have it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lc_support import ROOT, write_plugin

from wasmext import HostConfig
from wasmext.errors import ConfigError
from wasmext.testing import make_host

CALC = ROOT / "tests" / "mcp" / "servers" / "calc_server.py"


def asker(parent: Path, pid: str, command: str = "true", args: tuple[str, ...] = ()) -> Path:
    """A plugin folder whose manifest asks for the MCP server `side`."""
    return write_plugin(parent, pid, extra_toml=(
        f"[mcp.servers.side]\ncommand = {json.dumps(command)}\n"
        f"args = {json.dumps(list(args))}\n"))


@pytest.mark.parametrize("order", [("alpha", "beta"), ("beta", "alpha")])
def test_a_server_name_two_plugins_are_granted_is_run_by_neither_in_any_order(
        tmp_path: Path, order: tuple[str, str]) -> None:
    with make_host(config=HostConfig(data_dir=tmp_path / "data")) as host:
        for pid in order:
            host.add(asker(tmp_path / "plugins", pid), grants={"mcp-server:side"})
        assert host.mcp_server_claimants("side") == ["alpha", "beta"]
        assert host.mcp_server_owner("side") is None
        for pid in order:
            assert host._plugin_server_specs(host.plugins[pid]) == []
        said = [e for e in host.load_errors if "'side'" in e.message]
        assert [e.plugin_id for e in said] == list(order)
        assert all(isinstance(e, ConfigError) and "granted to the plugins alpha, beta, so "
                   "none of them runs it" in e.message for e in said), said
        # A plugin that asks for it without the grant contests nothing.
        host.add(asker(tmp_path / "plugins", "gamma"))
        assert host.mcp_server_claimants("side") == ["alpha", "beta"]
        host.unload(order[0])
        assert host.mcp_server_owner("side") == order[1]
        assert [s.name for s in host._plugin_server_specs(host.plugins[order[1]])] == ["side"]


def test_a_running_server_stops_when_its_name_becomes_contested_and_starts_when_not(
        tmp_path: Path) -> None:
    """What runs is what a fresh start with the loaded plugins would run: a second
    plugin granted `side` stops alpha's running server (its tools go), and unloading it
    starts alpha's again."""
    plugins = tmp_path / "plugins"
    with make_host(config=HostConfig(data_dir=tmp_path / "data")) as host:
        host.add(asker(plugins, "alpha", sys.executable, (str(CALC),)),
                 grants={"mcp-server:side"})
        clients = host.start_mcp()
        assert clients is not None and clients.status("side") == "connected"
        assert host.tools.execute("side__add", {"a": 2, "b": 3})["status"] == "ok"

        host.add(asker(plugins, "beta", sys.executable, (str(CALC),)),
                 grants={"mcp-server:side"})
        host.start_plugin_servers(host.plugins["beta"])  # as a rescan does for a new plugin
        assert all(s["name"] != "side" for s in clients.servers())
        assert not any(name.startswith("side__") for name in host.tools.tools)
        assert any("alpha, beta" in e.message and e.plugin_id == "beta"
                   for e in host.load_errors)

        host.unload("beta")
        assert clients.status("side") == "connected"
        assert host.tools.execute("side__add", {"a": 2, "b": 3})["status"] == "ok"
        assert host.mcp_server_owner("side") == "alpha"


def test_a_rescan_that_leaves_one_claimant_starts_its_server(tmp_path: Path) -> None:
    """Both granted in wasmext.toml at start: `side` runs for neither. beta's manifest
    then stops asking for it; the rescan that reloads beta starts alpha's `side`."""
    import hashlib

    from wasmext import Host, load_config

    plugins = tmp_path / "plugins"
    grants = ""
    for pid in ("alpha", "beta"):
        folder = asker(plugins, pid, sys.executable, (str(CALC),))
        module = hashlib.sha256((folder / f"{pid}.wasm").read_bytes()).hexdigest()
        manifest = hashlib.sha256((folder / "plugin.toml").read_bytes()).hexdigest()
        grants += (f'[grants.{pid}]\ndigest = "sha256:{module}"\n'
                   f'manifest = "sha256:{manifest}"\ncapabilities = ["mcp-server:side"]\n')
    config = tmp_path / "wasmext.toml"
    config.write_text(  # a configured server, so the host's MCP clients run from the start
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n' + grants +
        f"[mcp.servers.calc]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(CALC))}]\n")
    with Host(load_config(config)) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("calc") == "connected"
        assert all(s["name"] != "side" for s in clients.servers())
        assert sum("alpha, beta" in e.message for e in host.load_errors) == 2

        (plugins / "beta" / "plugin.toml").write_text('id = "beta"\nversion = "0.1.1"\n')
        assert host.rescan().reloaded == ["beta"]
        assert host.mcp_server_owner("side") == "alpha"
        assert clients.status("side") == "connected"
        assert host.tools.execute("side__add", {"a": 2, "b": 3})["status"] == "ok"


def test_the_operator_sees_a_contested_server_on_loaded_plugins_with_the_way_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`wasmext run` said `not loaded:` of two plugins its session header listed as
    loaded, `mcp ls` said only "no MCP servers configured", and the line told the operator
    to grant what both already held. Now: `error:` of the loaded plugins, the contest on
    `mcp ls`'s stderr, and the revoke that resolves it."""
    from click.testing import CliRunner

    from wasmext_cli.main import main

    plugins = tmp_path / "plugins"
    for pid in ("alpha", "beta"):
        asker(plugins, pid)
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    (tmp_path / "t.json").write_text(json.dumps(
        {"turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    runner = CliRunner()
    for pid in ("alpha", "beta"):
        assert runner.invoke(main, ["grant", pid, "mcp-server:side"]).exit_code == 0

    ran = runner.invoke(main, ["run", "t.json"])
    assert ran.exit_code == 0, ran.output
    assert "plugins: alpha, beta" in ran.stdout
    assert "not loaded" not in ran.stdout
    way_out = ("for each other, wasmext revoke ID mcp-server:side or drop it from "
               "[grants.ID]")
    for pid in ("alpha", "beta"):
        assert f"  error: plugin {pid}: config: MCP server 'side' is granted to the " \
            f"plugins alpha, beta, so none of them runs it" in ran.stdout
    assert way_out in ran.stdout

    listed = runner.invoke(main, ["mcp", "ls"])
    assert listed.exit_code == 0, listed.output
    assert sum(line.startswith("error: plugin ") and way_out in line
               for line in listed.stderr.splitlines()) == 2
    assert "or a plugin's own with the grant mcp-server:NAME" in listed.stdout

    # One revoke later only beta asks without the grant, and is told which one to give.
    assert runner.invoke(main, ["revoke", "beta", "mcp-server:side"]).exit_code == 0
    listed = runner.invoke(main, ["mcp", "ls"])
    assert "error: plugin beta: config: plugin beta asks for MCP server 'side' without " \
        "the grant 'mcp-server:side' (to run it: wasmext grant beta mcp-server:side)" \
        in listed.stderr
    assert "alpha, beta" not in listed.stderr


def test_mcp_serve_says_at_start_why_a_plugins_server_does_not_run(tmp_path: Path) -> None:
    """`wasmext mcp serve` printed the load errors before it started the MCP clients, so
    a contested (or ungranted) plugin server, found only then, was never said at all."""
    import subprocess

    from lc_support import cli_env

    for pid in ("alpha", "beta"):
        asker(tmp_path / "plugins", pid)
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    for pid in ("alpha", "beta"):
        subprocess.run([sys.executable, "-m", "wasmext_cli", "grant", pid, "mcp-server:side"],
                       cwd=tmp_path, env=cli_env(), check=True, capture_output=True,
                       timeout=60)
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "mcp", "serve"],
                          cwd=tmp_path, env=cli_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    said = [line for line in proc.stderr.splitlines() if "'side'" in line]
    assert said == [f"wasmext: plugin {pid}: config: MCP server 'side' is granted to the "
                    "plugins alpha, beta, so none of them runs it (keep the grant for one "
                    "of them: for each other, wasmext revoke ID mcp-server:side or drop it "
                    "from [grants.ID])"
                    for pid in ("alpha", "beta")], proc.stderr
