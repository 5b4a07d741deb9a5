"""Tools a plugin registers after load (`tool.register`, ABI minor 2), through the C SDK's
`wasmext_tool_register` in tests/plugins/runtime-tools: callable at once, the same name
replaces, the rules and caps of registration-time tools hold (named errors, bounded
time), the MCP catalog hears tools/list_changed, and the plugin keeps serving."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import pytest
from mcp.client.client import Client

from support import Built
from wasmext import Host, HostConfig, PluginError, Runtime
from wasmext.errors import ToolLimitError
from wasmext.mcp.server.serve import McpToolServer
from wasmext.services.tools import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_TOOLS_PER_PLUGIN

TIMEOUT = 30
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def new_host(built: Built, tmp_path: Path) -> Host:
    host = Host(HostConfig(state_backend="memory", data_dir=tmp_path / ".wasmext"),
                runtime=Runtime(cache=False), plugin_dirs=[])
    host.add(built["runtime-tools"], plugin_id="rt")
    return host


def add_tool(host: Host, **spec: Any) -> Any:
    return host.plugins["rt"].plugin.call("add_tool", spec).value


def test_a_tool_registered_at_runtime_is_called_and_replaced(built: Built,
                                                             tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        assert "rt__lookup" not in host.tools.tools
        first = add_tool(host, name="lookup", description="v1", input_schema=SCHEMA)
        assert first == {"name": "rt__lookup", "replaced": False}
        assert host.tools.call("rt__lookup", {"q": "x"}) == {
            "status": "ok", "output": {"tool": "lookup", "args": {"q": "x"}}}
        missing = host.tools.call("rt__lookup", {})
        assert missing["status"] == "error" and missing["error"]["code"] == "invalid"

        again = add_tool(host, name="lookup", description="v2")  # no schema: any object
        assert again == {"name": "rt__lookup", "replaced": True}
        tool = host.tools.tools["rt__lookup"]
        assert tool.description == "v2" and tool.owner == "plugin:rt"
        assert host.tools.call("rt__lookup", {})["status"] == "ok"
        assert [t["name"] for t in host.tools.catalog()].count("rt__lookup") == 1


def ref_bomb(levels: int) -> dict[str, Any]:
    """An object schema whose $defs each name the next one twice (2^levels paths)."""
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(levels)}
    defs[f"d{levels}"] = {"not": {}}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def test_a_recursive_schema_that_follows_the_data_is_kept(built: Built,
                                                           tmp_path: Path) -> None:
    tree = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}}}
    with new_host(built, tmp_path) as host:
        assert add_tool(host, name="tree", input_schema=tree)["name"] == "rt__tree"
        deep: dict[str, Any] = {}
        for _ in range(20):  # within the ABI's msgpack depth
            deep = {"kids": [deep]}
        assert host.tools.call("rt__tree", {"root": deep})["status"] == "ok"
        assert host.tools.call("rt__tree", {"root": {"kids": 1}})["status"] == "error"


def test_an_output_schema_bomb_is_a_limit_too(built: Built, tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        start = time.monotonic()
        with pytest.raises(ToolLimitError, match=r"output_schema expands through its \$refs"):
            host.tools.register_runtime("rt", {"name": "out", "output_schema": ref_bomb(40)})
        assert time.monotonic() - start < 3
        assert "rt__out" not in host.tools.tools
        assert add_tool(host, name="fine")["name"] == "rt__fine"


@pytest.mark.parametrize(("spec", "code", "says"), [
    ({"name": "bad name\x1b[31m"}, "invalid", "'name' must be letters"),
    ({"name": "x" * 65}, "invalid", "'name' must be letters"),
    ({"name": "arr", "input_schema": {"type": "array"}}, "invalid", "must be an object"),
    ({"name": "nocompile", "input_schema": {"type": "object", "minLength": "x"}},
     "invalid", "invalid JSON Schema"),
    ({"name": "badre", "input_schema": {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "(a)\\1"}}}}, "invalid", "invalid JSON Schema"),
    ({"name": "big", "input_schema": {"type": "object", "description": "d" * MAX_SCHEMA_BYTES}},
     "limit", "max_schema_bytes"),
    # 2 KB whose check took 2^40 steps holding the interpreter lock: every thread of the
    # host stood still on each call of the tool
    ({"name": "refbomb", "input_schema": ref_bomb(40)}, "limit", "expands through its $refs"),
    ({"name": "farref", "input_schema": {"type": "object", "properties": {
        "a": {"$ref": "https://169.254.169.254/s.json"}}}}, "invalid", "local JSON pointers"),
    ({"name": "dangling", "input_schema": {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/none"}}}}, "invalid", "names nothing"),
    ({"name": "unidigit", "input_schema": {"type": "object", "anyOf": [{}], "properties": {
        "a": {"$ref": "#/anyOf/\u00b2"}}}}, "invalid", "names nothing"),  # '2' to isdigit
])
def test_hostile_registrations_are_refused_by_name(built: Built, tmp_path: Path,
                                                   spec: dict[str, Any], code: str,
                                                   says: str) -> None:
    with new_host(built, tmp_path) as host:
        before = set(host.tools.tools)
        start = time.monotonic()
        with pytest.raises(PluginError) as info:
            add_tool(host, **spec)
        assert time.monotonic() - start < 3
        assert info.value.code == code and says in info.value.message
        assert "\x1b" not in info.value.message
        assert set(host.tools.tools) == before
        assert add_tool(host, name="fine")["name"] == "rt__fine"  # healthy afterwards
        assert host.tools.call("rt__fine", {})["status"] == "ok"


def test_a_schema_nested_past_the_cap_is_a_limit(built: Built, tmp_path: Path) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(MAX_SCHEMA_DEPTH // 2 + 1):  # each level is two maps deep
        schema = {"type": "object", "properties": {"a": schema}}
    with new_host(built, tmp_path) as host:
        with pytest.raises(PluginError) as info:
            add_tool(host, name="deep", input_schema=schema)
        assert info.value.code == "limit" and "max_schema_depth" in info.value.message
        assert "rt__deep" not in host.tools.tools


def test_the_tool_count_cap_holds_and_overwrites_still_work(built: Built,
                                                            tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        start = time.monotonic()
        with pytest.raises(PluginError) as info:
            host.plugins["rt"].plugin.call("add_many", MAX_TOOLS_PER_PLUGIN + 5)
        assert time.monotonic() - start < 10
        assert info.value.code == "limit" and "max_tools_per_plugin" in info.value.message
        mine = [n for n, t in host.tools.tools.items() if t.owner == "plugin:rt"]
        assert len(mine) == MAX_TOOLS_PER_PLUGIN
        # At the cap a new name is refused, the same name still replaces.
        with pytest.raises(PluginError):
            add_tool(host, name="one_more")
        assert add_tool(host, name="bulk_0", description="new")["replaced"] is True
        assert host.tools.call("rt__bulk_0", {})["status"] == "ok"


def test_a_reload_drops_the_runtime_tools(built: Built, tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        add_tool(host, name="temp")
        host.add(built["runtime-tools"], plugin_id="rt", replace=True)
        assert "rt__temp" not in host.tools.tools  # the instance that made it is gone


def test_the_mcp_catalog_hears_a_runtime_tool(built: Built, tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        server = McpToolServer(host, poll_interval=0.05)
        changed = anyio.Event()

        async def heard(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        async def main() -> None:
            async with Client(server.server, mode="legacy", message_handler=heard,
                              read_timeout_seconds=TIMEOUT) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                assert "rt__lookup" not in names
                await anyio.to_thread.run_sync(
                    lambda: add_tool(host, name="lookup", input_schema=SCHEMA))
                with anyio.fail_after(TIMEOUT):
                    await changed.wait()
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert listed["rt__lookup"].input_schema["required"] == ["q"]
                result = await client.call_tool("rt__lookup", {"q": "hi"})
                assert not result.is_error
                assert result.structured_content == {"tool": "lookup", "args": {"q": "hi"}} \
                    or "hi" in str(result.content)

        anyio.run(main)


class AskingModel:
    """Calls rt__lookup in a turn's first step when it is offered; records the offers."""

    name = "asking"

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def complete(self, messages: Any, tools: Any, turn: int, step: int) -> dict[str, Any]:
        names = [t["name"] for t in tools]
        if step == 0:
            self.offered.append(names)
        calls = [{"call_id": f"c{turn}", "tool": "rt__lookup", "args": {"q": "now"}}] \
            if step == 0 and "rt__lookup" in names else []
        return {"response": "done", "tool_calls": calls, "input_tokens": 1,
                "output_tokens": 1}


def test_the_agent_offers_a_runtime_tool_from_the_next_turn(built: Built,
                                                            tmp_path: Path) -> None:
    from wasmext.agent import Agent

    with new_host(built, tmp_path) as host, host.session() as s:
        model = AskingModel()
        agent = Agent(host, model, tools={})
        agent.run_turn(s, 0, "first")
        add_tool(host, name="lookup", input_schema=SCHEMA)
        report = agent.run_turn(s, 1, "second")
    assert "rt__lookup" not in model.offered[0] and "rt__lookup" in model.offered[1]
    (call,) = report.tool_calls
    assert call["tool"] == "rt__lookup"
    assert call["result"] == {"status": "ok", "output": {"tool": "lookup", "args": {"q": "now"}}}


@pytest.mark.slow  # compiling the Python component takes tens of seconds
def test_the_python_sdk_registers_a_tool(built: Built, tmp_path: Path) -> None:
    with Host(HostConfig(state_backend="memory", data_dir=tmp_path / ".wasmext"),
              runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        plugin = host.add(built["conformance-python"], plugin_id="py",
                          limits={"timeout_ms": 5000})
        ok = plugin.call("register_tool", {"name": "lookup", "input_schema": SCHEMA}).value
        again = plugin.call("register_tool", {"name": "lookup", "description": "v2"}).value
        bad = plugin.call("register_tool", {"name": "no spaces"}).value
        assert ok == {"ok": True, "value": {"name": "py__lookup", "replaced": False}}
        assert again["value"]["replaced"] is True
        assert host.tools.tools["py__lookup"].description == "v2"
        assert bad["ok"] is False and bad["error"]["code"] == "invalid"
        assert host.tools.call("py__lookup", {"q": 1}) == {
            "status": "ok", "output": {"tool": "lookup", "args": {"q": 1}}}


def test_a_plugins_many_large_tools_cost_each_mcp_request_nothing_new(
        built: Built, tmp_path: Path) -> None:
    # 256 tools of 60 KB schemas, allowed by the caps: the served list's fingerprint,
    # taken on the event loop before every request and poll, re-serialised all 15 MB each
    # time (0.56 s a request here, per such plugin).
    fat = {"type": "object", "description": "d" * 60_000}
    with new_host(built, tmp_path) as host:
        for i in range(MAX_TOOLS_PER_PLUGIN):
            host.tools.register_runtime("rt", {"name": f"fat{i}", "input_schema": fat})
        server = McpToolServer(host, poll_interval=0)
        first = server._compute_fingerprint()
        started = time.monotonic()
        for _ in range(100):
            assert server._compute_fingerprint() == first
        assert time.monotonic() - started < 10  # was 100 full serialisations, ~56 s
        add_tool(host, name="fat7", description="changed")
        assert server._compute_fingerprint() != first
        assert host.tools.call("rt__fat7", {})["status"] == "ok"
