"""The MCP client against real MCP servers (the official SDK's MCPServer)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import free_port
from wasmext.errors import ConfigError
from wasmext.mcp.client.connections import McpClients
from wasmext.mcp.client.spec import ServerSpec
from wasmext.mcp.client.tools import McpToolError, build_tool, tool_name
from wasmext.services.tools import ToolRegistry, bounded_schema, compile_schema, inert_schema
from wasmext.testing import make_host

MCPError = pytest.importorskip("mcp.shared.exceptions").MCPError

SERVERS = Path(__file__).parent / "servers"


def stdio(name: str, script: str, pid_file: Path | None = None, **kw: Any) -> ServerSpec:
    env = {"MCP_PID_FILE": str(pid_file)} if pid_file else {}
    return ServerSpec(name, "stdio", command=sys.executable, args=(str(SERVERS / script),),
                      env=env, **kw)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def pids(pid_file: Path) -> list[int]:
    return [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped by anyone else counts as ended.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    host = make_host()
    try:
        yield host.tools
    finally:
        host.close()


@pytest.fixture
def clients(registry: ToolRegistry) -> Iterator[McpClients]:
    c = McpClients(registry)
    try:
        yield c
    finally:
        c.stop()


def test_stdio_tools_register_and_call(clients: McpClients, registry: ToolRegistry) -> None:
    clients.start([stdio("calc", "calc_server.py")])
    assert clients.status("calc") == "connected"
    tool = registry.tools["calc__add"]
    assert tool.owner == "mcp:calc"
    assert tool.description == "Add two integers."
    assert tool.input_schema["properties"]["a"]["type"] == "integer"
    assert tool.input_schema["required"] == ["a", "b"]
    assert registry.call("calc__add", {"a": 2, "b": 3}) == {"status": "ok",
                                                             "output": {"result": 5}}
    assert registry.call("calc__echo", {"text": "hi"}) == {"status": "ok", "output": "hi"}
    # The registry validates against the server's schema before calling.
    assert registry.call("calc__add", {"a": "x", "b": 1})["error"]["code"] == "invalid"
    with pytest.raises(McpToolError, match="failed because nope"):
        registry.tools["calc__fail"].run({"why": "nope"}, None)
    assert registry.call("calc__fail", {"why": "x"})["status"] == "error"
    [entry] = clients.servers()
    assert entry == {"name": "calc", "transport": "stdio", "status": "connected",
                     "tools": ["calc__add", "calc__echo", "calc__fail"]}


def test_disabled_and_unreachable_servers(clients: McpClients,
                                          registry: ToolRegistry) -> None:
    clients.start([stdio("off", "calc_server.py", enabled=False),
                   ServerSpec("ghost", "stdio", command="/nonexistent/mcp-server",
                              connect_timeout_s=2),
                   ServerSpec("nohttp", "http", url="http://127.0.0.1:9/mcp",
                              connect_timeout_s=2)])
    assert clients.status("off") == "disabled"
    assert clients.status("ghost").startswith("unavailable: ")
    assert clients.status("nohttp").startswith("unavailable: ")
    assert not registry.tools
    with pytest.raises(KeyError):
        clients.status("nope")


@pytest.mark.parametrize(("transport", "flag", "path"),
                         [("http", "--http", "/mcp"), ("sse", "--sse", "/sse")])
def test_http_transports(clients: McpClients, registry: ToolRegistry, transport: str,
                         flag: str, path: str) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS / "calc_server.py"), flag,
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def accepts() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False
        assert wait_for(accepts, 20.0)
        clients.start([ServerSpec("web", transport, url=f"http://127.0.0.1:{port}{path}")])
        assert clients.status("web") == "connected"
        assert registry.call("web__add", {"a": 40, "b": 2})["output"] == {"result": 42}
        with pytest.raises(McpToolError, match="failed because http"):
            registry.tools["web__fail"].run({"why": "http"}, None)
    finally:
        proc.terminate()
        proc.wait(10)


def test_crash_drops_tools_then_reconnects(clients: McpClients, registry: ToolRegistry,
                                           tmp_path: Path) -> None:
    pid_file = tmp_path / "crash.pids"
    clients.start([stdio("crash", "crash_server.py", pid_file), stdio("calc", "calc_server.py")])
    assert clients.status("crash") == "connected"
    crash = registry.tools["crash__crash"]
    seen: list[str] = []

    def dropped() -> bool:
        seen.append(clients.status("crash"))
        return "crash__ping" not in registry.tools

    with pytest.raises(MCPError):  # the connection closes mid-call
        crash.run({}, None)
    assert wait_for(dropped, 5.0)
    assert wait_for(lambda: clients.status("crash").startswith("unavailable: ")
                    or clients.status("crash") == "connecting", 2.0)
    # The client respawns the stdio server: the tools come back.
    assert wait_for(lambda: clients.status("crash") == "connected", 15.0)
    assert registry.call("crash__ping", {})["output"] == {"result": "pong"}
    assert len(pids(pid_file)) == 2
    assert any(s.startswith("unavailable: ") for s in seen) or \
        clients.status("crash") == "connected"
    assert registry.call("calc__add", {"a": 1, "b": 1})["output"] == {"result": 2}


def test_unavailable_status_while_backing_off(clients: McpClients,
                                              registry: ToolRegistry) -> None:
    clients.start([stdio("crash", "crash_server.py")])
    with pytest.raises(MCPError):
        registry.tools["crash__crash"].run({}, None)
    # Seen within the 0.5 s backoff before the respawn.
    assert wait_for(lambda: clients.status("crash").startswith("unavailable: "), 5.0)
    assert not [n for n in registry.tools if n.startswith("crash__")]
    assert clients.servers()[0]["tools"] == []


def test_hanging_call_times_out_others_keep_working(clients: McpClients,
                                                    registry: ToolRegistry) -> None:
    clients.start([stdio("hang", "hang_server.py", call_timeout_s=1.0),
                   stdio("calc", "calc_server.py")])
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="hang"):
        registry.tools["hang__hang"].run({}, None)
    assert time.monotonic() - started < 3.0
    result = registry.call("hang__hang", {})
    assert result["status"] == "error" and "TimeoutError" in result["error"]["message"]
    assert registry.call("calc__add", {"a": 3, "b": 4})["output"] == {"result": 7}
    assert registry.call("hang__ping", {})["output"] == {"result": "pong"}
    assert clients.status("hang") == "connected"


def test_stop_ends_every_server_process(registry: ToolRegistry, tmp_path: Path) -> None:
    pid_file = tmp_path / "all.pids"
    clients = McpClients(registry)
    clients.start([stdio("calc", "calc_server.py", pid_file),
                   stdio("hang", "hang_server.py", pid_file, call_timeout_s=0.5)])
    with pytest.raises(TimeoutError):
        registry.tools["hang__hang"].run({}, None)
    running = pids(pid_file)
    assert len(running) == 2 and all(alive(p) for p in running)
    started = time.monotonic()
    clients.stop()
    assert time.monotonic() - started < 15.0
    assert wait_for(lambda: not any(alive(p) for p in running), 5.0)
    assert not registry.tools
    assert all(s["status"] == "unavailable: stopped" for s in clients.servers())
    clients.stop()  # idempotent


def test_tool_names_are_sanitized() -> None:
    assert tool_name("calc", "add") == "calc__add"
    assert tool_name("srv", "a.b c/d") == "srv__a_b_c_d"
    assert len(tool_name("s", "x" * 100)) == 64


def test_server_spec_validation() -> None:
    with pytest.raises(ConfigError, match="transport"):
        ServerSpec("x", "ftp", url="ftp://x")
    with pytest.raises(ConfigError, match="command"):
        ServerSpec("x", "stdio")
    with pytest.raises(ConfigError, match="url"):
        ServerSpec("x", "sse")
    with pytest.raises(ConfigError, match="letters"):
        ServerSpec("bad name!", "stdio", command="x")


# -- schema handling -----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
schema_keys = st.sampled_from(["type", "properties", "required", "items", "enum",
                               "minimum", "pattern", "additionalProperties", "$ref",
                               "anyOf", "title", "description", "format"])
schemaish = st.recursive(
    st.dictionaries(schema_keys, json_values | st.sampled_from(
        ["object", "string", "integer", "array", "nope", "[", "^a+$"]), max_size=4),
    lambda inner: st.dictionaries(schema_keys, inner | st.lists(inner, max_size=3)
                                  | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                                  max_size=4),
    max_leaves=10)


def _valid(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    try:
        bounded_schema(schema, "t", "t")  # the one path every tool's schema takes
        compile_schema(inert_schema(schema, "t", "t"), "t")
    except ConfigError:
        return False
    return True


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemaish | json_values)
def test_any_schema_is_kept_as_is_or_the_tool_skipped(schema: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wasmext.mcp"):
        tool = build_tool("srv", "t", "desc", schema, lambda args, session: None)
    if _valid(schema):
        assert tool is not None
        shown = inert_schema(schema, "t", "t")  # prose cleaned as for a plugin's tool
        if shown == schema:
            assert tool.input_schema is schema
        else:
            assert tool.input_schema == shown
        assert tool.name == "srv__t" and tool.owner == "mcp:srv"
    else:
        assert tool is None
        assert any("skipped" in r.getMessage() for r in caplog.records)


def test_a_servers_schema_bomb_skips_its_tool_at_once(caplog: pytest.LogCaptureFixture) -> None:
    # A listed schema whose $defs each name the next twice: checking an argument against
    # it took 2^40 steps holding the interpreter lock.
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(40)}
    defs["d40"] = {"not": {}}
    bomb = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="wasmext.mcp"):
        tool = build_tool("srv", "t\x1b[2J" + "n" * 5000, "", bomb,
                          lambda args, session: None)
        fine = build_tool("srv", "ok", "", {"type": "object"}, lambda args, session: None)
    assert time.monotonic() - started < 3
    assert tool is None and fine is not None
    said = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert said and "expands through its $refs" in said[0]
    assert "\x1b" not in said[0] and len(said[0]) < 400


@given(name=st.none() | st.integers() | st.text(max_size=80),
       description=st.none() | st.integers() | st.text(max_size=2000))
def test_odd_names_and_descriptions_never_crash(name: Any, description: Any) -> None:
    tool = build_tool("srv", name, description, {"type": "object"},
                      lambda args, session: None)
    if isinstance(name, str) and name:
        assert tool is not None
        assert len(tool.name) <= 64 and len(tool.description) <= 1024
        assert all((c.isalnum() and c.isascii()) or c in "_-" for c in tool.name)
    else:
        assert tool is None
