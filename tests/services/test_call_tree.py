"""The call tree: everything a plugin's call causes draws from that call's deadline and
host-call budget; a nested call never outlives its caller. Bounds here are generous on
purpose (a loaded machine): they tell "bounded" from "ran for many seconds"."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest

from wasmext import HostCallLimitExceeded, Timeout
from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, make_host, packed

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
OK = msgpack.packb({"ok": True, "value": "done"})


def calls_tool(name: str, times: int, *, tools: list[dict[str, Any]] | None = None,
               hooks: tuple[str, ...] = ("test",)) -> str:
    """A guest whose call runs `tool.call name` `times` times, then answers "done"."""
    req = msgpack.packb({"op": "tool.call", "name": name, "args": {}})
    body = f"""(local $i i32)
      (loop $again
        (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $i) (i32.const {times}))))
      (i64.const {packed(RESPONSE_AT, len(OK))})"""
    registration = {"hooks": [{"hook": h} for h in hooks]}
    if tools is not None:
        registration["tools"] = tools
    return guest_wat(body, imports=HOST_CALL, data=req, response={"ok": True, "value": "done"},
                     registration=registration)


HEALTHY = guest_wat(hooks=("test",))


def assert_healthy(host: Any) -> None:
    assert host.plugins["healthy"].plugin.call("test").value == "ok"


def test_hook_calling_a_slow_host_tool_60_times_times_out() -> None:
    wat = calls_tool("slow", 60)
    with make_host((wat, {"plugin_id": "hammer", "grants": {"tools", "tool:slow"},
                          "limits": {"timeout_ms": 300}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        host.tools.register_python("slow", lambda a: time.sleep(0.2) or "late")
        started = time.monotonic()
        with pytest.raises(Timeout):
            host.plugins["hammer"].plugin.call("test")
        assert time.monotonic() - started < 10
        # Through the host: a named fault, recorded, and the host keeps serving.
        started = time.monotonic()
        result, error = host.try_call("hammer", "test", None)
        assert result is None and error is not None and error.startswith("timeout")
        assert time.monotonic() - started < 10
        assert_healthy(host)


def test_host_tool_time_is_the_callers_host_call_time() -> None:
    wat = calls_tool("slow", 60)
    with make_host((wat, {"plugin_id": "hammer", "grants": {"tools", "tool:slow"},
                          "limits": {"timeout_ms": 5000, "host_call_timeout_ms": 250}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        host.tools.register_python("slow", lambda a: time.sleep(0.1) or "late")
        started = time.monotonic()
        with pytest.raises(HostCallLimitExceeded):
            host.plugins["hammer"].plugin.call("test")
        assert time.monotonic() - started < 4  # well before the 5 s wall clock
        assert_healthy(host)


def test_self_recursive_fan_out_tool_is_bounded() -> None:
    wat = calls_tool("fan__again", 999, tools=[{"name": "again"}], hooks=("on_tool",))
    with make_host((wat, {"plugin_id": "fan", "grants": {"tools", "tool:fan__*"},
                          "limits": {"timeout_ms": 300}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        started = time.monotonic()
        result = host.tools.execute("fan__again", {})
        assert time.monotonic() - started < 10
        assert result["status"] == "error"
        assert result["error"]["code"] in {"timeout", "host call limit"}
        assert_healthy(host)


def test_fan_out_host_calls_count_against_the_root() -> None:
    # Every level makes 999 host calls; the tree has the root's 1000 in all.
    wat = calls_tool("fan__again", 999, tools=[{"name": "again"}], hooks=("on_tool",))
    with make_host((wat, {"plugin_id": "fan", "grants": {"tools", "tool:fan__*"},
                          "limits": {"timeout_ms": 60000, "host_call_timeout_ms": 60000}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        started = time.monotonic()
        result = host.tools.execute("fan__again", {})
        assert time.monotonic() - started < 30
        assert result["error"]["code"] == "host call limit"
        assert_healthy(host)


def test_nested_plugin_call_never_outlives_its_caller() -> None:
    spin = guest_wat("(loop (br 0)) (i64.const 0)",
                     registration={"hooks": [{"hook": "on_tool"}], "tools": [{"name": "spin"}]})
    caller = calls_tool("slowp__spin", 1)
    with make_host((spin, {"plugin_id": "slowp", "limits": {"timeout_ms": 5000,
                                                            "fuel_per_call": 10**12}}),
                   (caller, {"plugin_id": "caller", "grants": {"tools", "tool:slowp__*"},
                             "limits": {"timeout_ms": 150}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        for _ in range(4):  # a fifth fault in a row would quarantine the caller
            started = time.monotonic()
            with pytest.raises(Timeout):
                host.plugins["caller"].plugin.call("test")
            assert time.monotonic() - started < 2  # not the callee's 5 s
        # The callee ran out of its caller's time: not its fault, no quarantine.
        callee = host.plugins["slowp"].plugin
        assert callee.faults == 0 and not callee.quarantined
        assert host.plugins["caller"].plugin.faults == 4
        assert_healthy(host)


def test_nested_call_after_the_deadline_is_refused_at_once() -> None:
    wat = calls_tool("t__noop", 1)
    noop = guest_wat(registration={"hooks": [{"hook": "on_tool"}], "tools": [{"name": "noop"}]})
    with make_host((noop, {"plugin_id": "t"}),
                   (wat, {"plugin_id": "c", "grants": {"tools", "tool:t__*"}})) as host:
        assert host.plugins["c"].plugin.call("test").value == "done"
