"""`wasmext run` starts the configured MCP servers and offers their tools to the agent."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import Built

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ROOT / "tests" / "mcp" / "servers"


def write_config(folder: Path, server_name: str, plugins: Path | None = None,
                 extra: str = "") -> Path:
    """A wasmext.toml with the SDK calc server as `server_name` (and a plugin folder)."""
    config = folder / "wasmext.toml"
    plugin_part = f'[plugins]\nworkspace_dir = "{plugins}"\n' if plugins else ""
    config.write_text(
        f'[host]\ndata_dir = "{folder / "state"}"\n{plugin_part}'
        f'[mcp.servers.{server_name}]\ncommand = "{sys.executable}"\n'
        f'args = ["{SERVERS / "calc_server.py"}"]\n{extra}')
    return config


def write_transcript(folder: Path, calls: list[dict[str, Any]]) -> Path:
    path = folder / "transcript.json"
    path.write_text(json.dumps({"model": "replay", "turns": [
        {"user": "add please", "steps": [{"response": "", "tool_calls": calls},
                                        {"response": "done"}]}]}))
    return path


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "run", *args],
                          capture_output=True, text=True, timeout=120, cwd=folder)


def test_run_offers_the_configured_mcp_servers_tools_beside_the_built_in_ones(
        built: Built, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    shutil.copytree(built["agent-guard"], plugins / "agent-guard")
    # The real plugin refuses one of the MCP server's tools by name.
    config = write_config(tmp_path, "mathsrv", plugins,
                          '[plugin.agent-guard]\nsettings = { blocked_tools = "mathsrv__fail" }\n')
    transcript = write_transcript(tmp_path, [
        {"tool": "mathsrv__add", "args": {"a": 2, "b": 3}},
        {"tool": "calc", "args": {"expression": "6*7"}},
        {"tool": "mathsrv__fail", "args": {"why": "x"}}])
    proc = run(tmp_path, str(transcript), "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["load_errors"] == []
    calls = {c["tool"]: c["result"] for c in doc["turns"][0]["tool_calls"]}
    assert calls["mathsrv__add"]["status"] == "ok", calls
    assert "5" in json.dumps(calls["mathsrv__add"]["output"])
    assert calls["calc"] == {"status": "ok", "output": 42}
    # agent-guard's before_tool saw the MCP tool's name and refused it.
    assert calls["mathsrv__fail"]["status"] == "error"
    assert "failed because" not in json.dumps(calls["mathsrv__fail"])
    assert any(e["hook"] == "before_tool" and e["plugin"] == "agent-guard"
               for e in doc["trace"])


def test_a_server_named_like_a_built_in_tool_is_reported_with_a_way_out(
        tmp_path: Path) -> None:
    config = write_config(tmp_path, "calc")
    transcript = write_transcript(tmp_path, [{"tool": "calc__add", "args": {"a": 1, "b": 2}}])
    proc = run(tmp_path, str(transcript), "--config", str(config))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "MCP server 'calc'" in line and "built-in tool 'calc'" in line, line
    assert "--no-builtin-tools" in line and "[mcp.servers.calc]" in line
    # The way out it names works: the server's tools are then the agent's.
    proc = run(tmp_path, str(transcript), "--config", str(config), "--no-builtin-tools",
               "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["turns"][0]["tool_calls"][0]["result"]
    assert result["status"] == "ok" and "3" in json.dumps(result["output"])


def test_a_plugin_named_like_a_built_in_tool_is_reported_with_a_way_out(tmp_path: Path) -> None:
    import wasmtime

    from wasmext.testing import guest_wat

    folder = tmp_path / "plugins" / "clock"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "clock"\nversion = "1.0.0"\nabi = 1\n')
    wat = guest_wat(response={"continue": True},
                    registration={"hooks": [{"hook": "before_tool"}], "name": "clock"})
    (folder / "clock.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    transcript = write_transcript(tmp_path, [{"tool": "calc", "args": {"expression": "1"}}])
    proc = run(tmp_path, str(transcript), "--plugins", str(tmp_path / "plugins"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "plugin 'clock'" in line and "built-in tool 'clock'" in line, line
    assert "wasmext disable clock" in line and "--no-builtin-tools" in line


def test_a_server_that_does_not_start_is_named_on_stderr(tmp_path: Path) -> None:
    """The agent ran without the server's tools and nothing in the run said so."""
    config = write_config(tmp_path, "mathsrv", extra=f'[mcp.servers.gone]\ncommand = '
                                                    f'"{tmp_path / "no-such-server"}"\n')
    transcript = write_transcript(tmp_path, [{"tool": "mathsrv__add", "args": {"a": 2, "b": 3}}])
    proc = run(tmp_path, str(transcript), "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "mcp server" in line]
    assert len(said) == 1, proc.stderr
    assert said[0].startswith("wasmext: mcp server gone is unavailable: ")
    assert said[0].endswith("; the agent runs without its tools (`wasmext mcp ls` shows "
                            "every server)")
    assert "tool mathsrv__add" in proc.stdout and '"status": "ok"' in proc.stdout
