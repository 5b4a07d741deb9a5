"""Tool schemas compile once with a linear-time regex engine (no ReDoS), and tool names
are unambiguous by owner (a plugin cannot take an MCP server's names)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from support import ROOT
from wasmext import ConfigError
from wasmext.host import Host
from wasmext.services.tools import compile_schema
from wasmext.testing import guest_wat, make_host

REDOS = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|a)*$"}}}


def test_redos_pattern_validates_in_bounded_time() -> None:
    tools = [{"name": "t", "input_schema": REDOS}]
    wat = guest_wat(registration={"hooks": [{"hook": "on_tool"}], "tools": tools},
                    response={"ok": True, "value": "fine"})
    with make_host((wat, {"plugin_id": "victim"})) as host:
        host.tools.register_python("host_redos", lambda a: "fine", input_schema=REDOS)
        for name in ("victim__t", "host_redos"):
            started = time.monotonic()
            bad = host.tools.execute(name, {"s": "a" * 5000 + "b"})
            assert time.monotonic() - started < 2
            assert bad["error"]["code"] == "invalid"
            assert host.tools.execute(name, {"s": "aaaa"})["status"] == "ok"


def test_schemas_that_do_not_compile_are_refused_at_registration() -> None:
    backref = {"type": "object", "properties": {"s": {"pattern": "(a)\\1"}}}
    remote = {"$ref": "http://127.0.0.1:9/schema.json"}
    wat = guest_wat(registration={"hooks": [{"hook": "on_tool"}], "tools": [
        {"name": "ok", "input_schema": REDOS}, {"name": "back", "input_schema": backref},
        {"name": "remote", "input_schema": remote}]})
    with make_host((wat, {"plugin_id": "p"})) as host:
        assert sorted(host.tools.tools) == ["p__ok"]
        problems = " ".join(e.message for e in host.load_errors)
        assert "tools[1]" in problems and "tools[2]" in problems
        for schema in (backref, remote):
            with pytest.raises(ConfigError, match="invalid JSON Schema"):
                host.tools.register_python("h", lambda a: None, input_schema=schema)


simple_schema = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["string", "integer", "number", "boolean", "array", "object"]),
    "minimum": st.integers(-5, 5), "maximum": st.integers(-5, 5),
    "minLength": st.integers(0, 4), "maxLength": st.integers(0, 4),
    "pattern": st.sampled_from(["^a+$", "b", "^[0-9]{2}$", "x|y"]),
    "enum": st.lists(st.integers(0, 3) | st.text("ab", max_size=2), min_size=1, max_size=3),
    "required": st.lists(st.sampled_from(["a", "b"]), unique=True, max_size=2),
})
instances = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text("ab019xy", max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", "c"]), inner, max_size=3), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(schema=simple_schema, instance=instances)
def test_validation_agrees_with_python_jsonschema(schema: dict[str, Any], instance: Any
                                                  ) -> None:
    expected = jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert compile_schema(schema, "t").is_valid(instance) == expected


def plugin_folder(root: Path, pid: str, wat: str) -> None:
    folder = root / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n')


def collision_config(tmp_path: Path) -> Path:
    echo = guest_wat(registration={"hooks": [{"hook": "on_tool"}], "tools": [{"name": "echo"}]},
                     response={"ok": True, "value": "from the plugin"})
    plugin_folder(tmp_path / "plugins", "calc", echo)
    plugin_folder(tmp_path / "plugins", "healthy", guest_wat(hooks=("test",)))
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[mcp.servers.calc]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(ROOT / "tests" / "mcp" / "servers" / "calc_server.py"))}]
call_timeout_s = 20
""")
    return config


def test_plugin_named_like_an_mcp_server_is_refused(tmp_path: Path) -> None:
    with Host.from_config(collision_config(tmp_path)) as host:
        assert "calc" not in host.plugins and "calc__echo" not in host.tools.tools
        errors = [e for e in host.load_errors if e.plugin_id == "calc"]
        assert errors and "plugin calc not loaded" in errors[0].message
        assert "mcp:calc" in errors[0].message
        host.start_mcp()
        deadline = time.monotonic() + 20
        while "calc__echo" not in host.tools.tools and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.tools.tools["calc__echo"].owner == "mcp:calc"
        assert host.tools.call("calc__echo", {"text": "hi"}) == {"status": "ok",
                                                                "output": "hi"}
        assert host.plugins["healthy"].plugin.call("test").value == "ok"


def test_no_owner_takes_another_owners_prefix() -> None:
    with make_host() as host:
        host.tools.claim("srv", "mcp:srv")
        with pytest.raises(ConfigError, match="mcp:srv"):
            host.tools.register_python("srv__x", lambda a: None)
        with pytest.raises(ConfigError):
            host.tools.claim("srv__sub", "mcp:srv__sub")  # `srv__sub__t` would be ambiguous
        wat = guest_wat(registration={"hooks": [{"hook": "on_tool"}],
                                      "tools": [{"name": "x"}]})
        with pytest.raises(ConfigError, match="plugin srv not loaded"):
            host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id="srv")


def test_cli_reports_the_refused_plugin_in_one_line(tmp_path: Path) -> None:
    config = collision_config(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
           "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "list", "--config",
                           str(config)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=env)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("not loaded: plugin calc")]
    assert len(lines) == 1 and "mcp:calc" in lines[0], proc.stderr + proc.stdout
