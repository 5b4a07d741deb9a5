"""The tool registry: plugin and host tools, schemas, shadowing, tool.call grants and depth."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from support import Built, innermost_tool_result
from wasmext import ConfigError, PluginError
from wasmext.services.tools import MAX_DEPTH
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def tool_plugin(tools: list[dict[str, Any]], response: Any = None, body: str | None = None,
                data: bytes = b"") -> str:
    return guest_wat(body, response=response if response is not None else
                     {"ok": True, "value": {"found": 1}}, data=data,
                     imports=HOST_CALL if body else "",
                     registration={"hooks": [{"hook": "on_tool"}], "tools": tools})


def test_plugin_tools_are_named_validated_and_called() -> None:
    wat = tool_plugin([{"name": "lookup", "description": "Find\\x1b[31m it", "input_schema":
                        SCHEMA}])
    with make_host((wat, {"plugin_id": "kb"})) as host:
        tool = host.tools.tools["kb__lookup"]
        assert tool.owner == "plugin:kb" and "\x1b" not in tool.description
        assert host.tools.execute("kb__lookup", {"q": "x"}) == {"status": "ok",
                                                                "output": {"found": 1}}
        bad = host.tools.execute("kb__lookup", {"q": 5})
        assert bad["status"] == "error" and bad["error"]["code"] == "invalid"
        assert host.tools.execute("nope", {})["error"]["code"] == "not_found"
        with host.session() as s:
            assert host.tools.call("kb__lookup", {"q": "x"}, s)["status"] == "ok"
            assert any(e.hook == "on_tool" for e in s.trace.events)


def test_invalid_schemas_and_names_are_refused() -> None:
    wat = tool_plugin([{"name": "ok", "input_schema": SCHEMA},
                       {"name": "bad schema", "input_schema": SCHEMA},
                       {"name": "worse", "input_schema": {"type": "no-such-type"}}])
    with make_host((wat, {"plugin_id": "p"})) as host:
        assert sorted(host.tools.tools) == ["p__ok"]
        problems = " ".join(e.message for e in host.load_errors)
        assert "tools[1]" in problems and "invalid JSON Schema" in problems


def test_plugins_cannot_shadow_host_tools() -> None:
    with make_host() as host:
        host.tools.register_python("p__x", lambda a: "host", input_schema={"type": "object"})
        with pytest.raises(ConfigError, match="plugin p not loaded"):
            host.add(bytes(__import__("wasmtime").wat2wasm(tool_plugin([{"name": "x"}]))),
                     plugin_id="p")
        assert host.tools.tools["p__x"].owner == "host" and "p" not in host.plugins
        with pytest.raises(ConfigError):
            host.tools.register_python("bad name!", lambda a: None)


def test_tool_call_op_needs_a_grant_per_tool() -> None:
    req = msgpack.packb({"op": "tool.call", "name": "echo", "args": {"v": 7}})
    caller = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))",
                       imports=HOST_CALL, data=req, hooks=("test",))
    with make_host((caller, {"plugin_id": "allowed", "grants": {"tools", "tool:ech*"}}),
                   (caller, {"plugin_id": "refused", "grants": {"tools"}})) as host:
        host.tools.register_python("echo", lambda a: a["v"] * 6)
        result = host.plugins["allowed"].plugin.call("test").value
        assert result == {"status": "ok", "output": 42}
        with pytest.raises(PluginError) as info:
            host.plugins["refused"].plugin.call("test")
        assert info.value.code == "denied"


def test_tool_calls_cannot_recurse_without_bound() -> None:
    req = msgpack.packb({"op": "tool.call", "name": "loop__again", "args": {}})
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))"
    wat = tool_plugin([{"name": "again"}], body=body, data=req)
    with make_host((wat, {"plugin_id": "loop", "grants": {"tools", "tool:loop__*"}})) as host:
        result = host.tools.execute("loop__again", {})
    # Each level answers the inner level's result; the innermost is the depth refusal.
    depth, result = innermost_tool_result(result)
    assert depth == MAX_DEPTH
    assert result["error"]["code"] == "limit"


def test_relay_plugin_calls_another_tool(built: Built) -> None:
    """The C relay plugin's tool answers by calling a host tool through tool.call."""
    with make_host((built["relay-tools"], {"grants": {"tools", "tool:calc__*"}})) as host:
        host.tools.register_python("calc__echo", lambda a: f"echo: {a['text']}",
                                   input_schema={"type": "object", "properties": {
                                       "text": {"type": "string"}}, "required": ["text"]})
        with host.session() as s:
            result = host.tools.call("relay-tools__ask", {"question": "hi"}, s)
        assert result == {"status": "ok", "output": {"via": "calc__echo",
                                                     "answer": "echo: hi"}}
        refused = host.tools.execute("relay-tools__ask", {"question": 5})
        assert refused["error"]["code"] == "invalid"
