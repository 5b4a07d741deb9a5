"""What wasmext.toml decides for `wasmext run`: MCP server environments, the global MCP
connect timeout, the [extensions] switch and its plugin folders."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import Built
from wasmext import load_config

ROOT = Path(__file__).resolve().parents[2]
ENV_SERVER = ROOT / "tests" / "mcp" / "servers" / "env_server.py"
HOST_SECRET = "host-secret-7c1e9a"


def transcript(folder: Path, calls: list[dict[str, Any]]) -> Path:
    path = folder / "transcript.json"
    path.write_text(json.dumps({"model": "replay", "turns": [
        {"user": "go", "steps": [{"response": "", "tool_calls": calls},
                                 {"response": "done"}]}]}))
    return path


def run(folder: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "run", *args],
                          capture_output=True, text=True, timeout=120, cwd=folder,
                          env={**os.environ, **(env or {})})


def outputs(proc: subprocess.CompletedProcess[str]) -> list[Any]:
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    return [c["result"].get("output", c["result"]) for c in doc["turns"][0]["tool_calls"]]


def env_calls(server: str, names: list[str]) -> list[dict[str, Any]]:
    return [{"tool": f"{server}__env", "args": {"name": n}} for n in names]


def env_server_table(name: str, extra: str = "") -> str:
    return (f'[mcp.servers.{name}]\ncommand = "{sys.executable}"\n'
            f'args = ["{ENV_SERVER}"]\n{extra}')


def test_operator_servers_inherit_the_environment_unless_they_opt_out(tmp_path: Path) -> None:
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "state"}"\n'
                      + env_server_table("inherits", 'env = { OWN = "set-by-table" }\n')
                      + env_server_table("minimal", "inherit_env = false\n"
                                         'env = { OWN = "set-by-table" }\n'))
    calls = env_calls("inherits", ["WASMEXT_T_PARENT", "OWN"]) \
        + env_calls("minimal", ["WASMEXT_T_PARENT", "OWN", "PATH"])
    proc = run(tmp_path, str(transcript(tmp_path, calls)), "--config", str(config), "--json",
               env={"WASMEXT_T_PARENT": "from-parent"})
    got = outputs(proc)
    assert got[:2] == ["from-parent", "set-by-table"]
    assert got[2:4] == ["<unset>", "set-by-table"]
    assert got[4] not in ("<unset>", "")  # the SDK's minimal set: PATH still there


def test_a_plugins_own_server_gets_its_allowed_variables_and_settings_never_the_host_env(
        built: Built, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    folder = plugins / "agent-guard"
    shutil.copytree(built["agent-guard"], folder)
    # The plugin asks for inheritance itself: it must not get it.
    with (folder / "plugin.toml").open("a") as manifest:
        manifest.write("\n" + env_server_table("penv", "inherit_env = true\n"
                                               'env = { FROM_MANIFEST = "m" }\n'))
    digest = hashlib.sha256((folder / "agent-guard.wasm").read_bytes()).hexdigest()
    manifest_digest = hashlib.sha256((folder / "plugin.toml").read_bytes()).hexdigest()
    config = tmp_path / "wasmext.toml"
    config.write_text(
        f'[host]\ndata_dir = "{tmp_path / "state"}"\n'
        f'[plugins]\nworkspace_dir = "{plugins}"\n'
        f'[grants.agent-guard]\ndigest = "sha256:{digest}"\nmanifest = "sha256:{manifest_digest}"\n'
        'capabilities = ["mcp-server:penv"]\n'
        '[plugin.agent-guard]\nenv = ["WASMEXT_T_ALLOWED"]\n'
        'settings = { blocked_tools = "shell,debug" }\n'
        '[llm]\nurl = "http://127.0.0.1:9/v1"\napi_key_env = "WASMEXT_T_LLM_KEY"\n')
    names = ["WASMEXT_T_SECRET", "WASMEXT_T_ALLOWED", "WASMEXT_T_LLM_KEY",
             "WASMEXT_SETTING_BLOCKED_TOOLS", "FROM_MANIFEST", "PATH"]
    proc = run(tmp_path, str(transcript(tmp_path, env_calls("penv", names))), "--config",
               str(config), "--json",
               env={"WASMEXT_T_SECRET": HOST_SECRET, "WASMEXT_T_ALLOWED": "allowed-value",
                    "WASMEXT_T_LLM_KEY": HOST_SECRET + "-llm"})
    got = outputs(proc)
    assert got[0] == "<unset>"  # a host variable nobody allowed the plugin
    assert got[1] == "allowed-value"  # [plugin.agent-guard] env
    assert got[2] == "<unset>"  # a host credential, never a plugin's
    assert got[3] == "shell,debug"  # its settings
    assert got[4] == "m"
    assert got[5] not in ("<unset>", "")
    assert HOST_SECRET not in proc.stdout + proc.stderr


def test_the_global_connect_timeout_applies_to_servers_without_their_own(
        tmp_path: Path) -> None:
    silent = f'command = "{sys.executable}"\nargs = ["-c", "import time; time.sleep(60)"]\n'
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "state"}"\n'
                      '[mcp]\nconnect_timeout_s = 0.5\n'
                      f'[mcp.servers.silent]\n{silent}'
                      f'[mcp.servers.patient]\n{silent}connect_timeout_s = 20\n'
                      '[mcp.servers.patient2]\n'
                      f'command = "{sys.executable}"\nargs = ["x.py"]\n')
    servers = {s.name: s.connect_timeout_s for s in load_config(config).mcp_servers}
    assert servers == {"silent": 0.5, "patient": 20.0, "patient2": 0.5}
    # Without a global one, a table keeps the default.
    alone = tmp_path / "alone.toml"
    alone.write_text(f'[mcp.servers.silent]\n{silent}')
    assert load_config(alone).mcp_servers[0].connect_timeout_s == 10.0
    # `wasmext run` gives up on the silent server after the global 0.5 s, not 10 s. The
    # server notes when it started and when the host closed its input: timed inside the
    # server, the interval leaves out the Python start-ups a loaded machine stretches.
    marks, server = tmp_path / "marks", tmp_path / "silent.py"
    server.write_text("import sys, time\n"
                      "def note(): open(sys.argv[1], 'a').write(f'{time.monotonic()}\\n')\n"
                      "note(); sys.stdin.buffer.read(); note(); time.sleep(60)\n")
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "state"}"\n'
                      f'[mcp]\nconnect_timeout_s = 0.5\n[mcp.servers.silent]\n'
                      f'command = "{sys.executable}"\nargs = ["{server}", "{marks}"]\n')
    proc = run(tmp_path, str(transcript(tmp_path, [{"tool": "silent__x", "args": {}}])),
               "--config", str(config), "--json")
    assert outputs(proc) == [{"status": "error", "error": {"message": "no tool 'silent__x'"}}]
    # The first process's two marks: on a slow machine the supervisor may start the
    # server again after its back-off before the run ends, and that one notes too.
    started, closed = map(float, marks.read_text().split()[:2])
    assert closed - started < 5.0  # the default would be 10 s


def test_extensions_directories_are_read_and_enabled_false_loads_nothing(
        built: Built, tmp_path: Path) -> None:
    more = tmp_path / "more"
    shutil.copytree(built["agent-guard"], more / "agent-guard")
    shutil.copytree(built["text-tags"], tmp_path / "also" / "text-tags")
    config = tmp_path / "wasmext.toml"
    base = f'[host]\ndata_dir = "{tmp_path / "state"}"\n'
    config.write_text(base + '[extensions]\ndirectories = ["more", "also"]\n')
    script = str(transcript(tmp_path, [{"tool": "shell", "args": {}}]))
    proc = run(tmp_path, script, "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(doc["plugins"]) == ["agent-guard", "text-tags"]  # every listed folder
    assert doc["turns"][0]["tool_calls"][0]["result"]["status"] == "error"  # it refused
    config.write_text(base + '[extensions]\nenabled = false\ndirectories = ["more"]\n'
                      '[extensions.remote_guard]\ntype = "validator"\nsubject = "a.b"\n')
    assert load_config(config).extensions == {}
    proc = run(tmp_path, script, "--config", str(config), "--plugins", str(more), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["plugins"] == [] and doc["load_errors"] == []
    assert doc["turns"][0]["tool_calls"][0]["result"]["status"] == "ok"  # nobody refused
