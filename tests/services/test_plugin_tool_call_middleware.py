"""A plugin's `tool.call` goes through the same `tool_call` middleware as the
application's own call: a layer that refuses a tool refuses it to a plugin holding a
`tool:` grant too (HOLE: the op called the tool directly, so any plugin with the grant
went around an operator's policy layer), a layer's rewrite reaches the tool, and a
layer calling tools from inside its own layer is stopped by the nesting bound."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest

from support import innermost_tool_result
from wasmext import HookAborted, HostCallLimitExceeded, PluginError, Timeout
from wasmext.services.tools import MAX_DEPTH
from wasmext.testing import (
    DATA_AT,
    HOST_CALL_IMPORT,
    guest_wat,
    host_calls_wat,
    make_host,
    packed,
)

HEALTHY = guest_wat(response={"ok": True, "value": "alive"})
NEXT = msgpack.packb({"op": "next"})

# `$has(p, l, n, nl)`: whether the nl bytes at n occur in the l bytes at p.
HAS = """(func $has (param $p i32) (param $l i32) (param $n i32) (param $nl i32) (result i32)
  (local $i i32) (local $j i32)
  (block $no
    (loop $outer
      (br_if $no (i32.gt_u (i32.add (local.get $i) (local.get $nl)) (local.get $l)))
      (local.set $j (i32.const 0))
      (block $mismatch
        (loop $inner
          (if (i32.eq (local.get $j) (local.get $nl)) (then (return (i32.const 1))))
          (br_if $mismatch
            (i32.ne (i32.load8_u (i32.add (local.get $p) (i32.add (local.get $i) (local.get $j))))
                    (i32.load8_u (i32.add (local.get $n) (local.get $j)))))
          (local.set $j (i32.add (local.get $j) (i32.const 1)))
          (br $inner)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $outer)))
  (i32.const 0))"""


def refusing_layer(needle: bytes) -> str:
    """A tool_call layer that fails (`denied`) a call whose request names `needle` and
    passes every other call on with `next`."""
    deny = msgpack.packb({"ok": False, "error": {"code": "denied",
                                                 "message": "policy: no shell here"}})
    needle_at = DATA_AT + len(NEXT)
    deny_at = needle_at + len(needle)
    body = f"""
      (if (call $has (local.get $p) (local.get $l) (i32.const {needle_at})
                     (i32.const {len(needle)}))
        (then (return (i64.const {packed(deny_at, len(deny))}))))
      (call $host_call (i32.const {DATA_AT}) (i32.const {len(NEXT)}))"""
    return guest_wat(body, imports=HOST_CALL_IMPORT, data=NEXT + needle + deny, extra=HAS,
                     registration={"hooks": [{"hook": "tool_call"}]})


def calling(name: str, args: dict[str, Any]) -> str:
    """A plugin whose `test` hook answers what `tool.call name args` answered it."""
    return host_calls_wat({"op": "tool.call", "name": name, "args": args})


def recording(host: Any, name: str) -> list[dict[str, Any]]:
    """Register the host tool `name`, which notes the arguments it ran with."""
    ran: list[dict[str, Any]] = []
    host.tools.register_python(name, lambda args: ran.append(args) or {"ran": args})
    return ran


def test_a_refusing_layer_refuses_a_plugins_tool_call() -> None:
    caller = calling("shell__exec", {"cmd": "rm -rf /"})
    with make_host((refusing_layer(b"shell__exec"), {"plugin_id": "policy", "failure": "closed"}),
                   (caller, {"plugin_id": "sneaky", "grants": {"tools", "tool:*"}}),
                   (calling("calc__echo", {"v": 1}),
                    {"plugin_id": "honest", "grants": {"tools", "tool:*"}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        shell = recording(host, "shell__exec")
        echo = recording(host, "calc__echo")
        # Outside any session (an event, a tick, a bare call) ...
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            host.plugins["sneaky"].plugin.call("test")
        assert time.monotonic() - started < 5
        assert info.value.code == "denied"
        assert "tool_call middleware of policy stopped the call" in info.value.message
        assert "no shell here" in info.value.message
        # ... and inside the application's session, whose trace shows the layer.
        with host.session("s") as session:
            result, error = host.try_call("sneaky", "test", None, session)
            assert result is None and error is not None and error.startswith("denied")
            notes = [(e.hook, e.plugin_id, e.outcome) for e in session.trace.events]
            assert ("tool_call", "policy", "failed") in notes
            # The application's own call meets the same layer, exactly as before.
            with pytest.raises(HookAborted):
                host.tools.call("shell__exec", {"cmd": "ls"}, session)
            # A call the layer lets through still works, from a plugin and from the app.
            assert host.try_call("honest", "test", None, session)[0].value == {  # type: ignore[union-attr]
                "status": "ok", "output": {"ran": {"v": 1}}}
            assert host.tools.call("calc__echo", {"v": 2}, session)["status"] == "ok"
        assert shell == []  # the refused tool never ran, for anyone
        assert echo == [{"v": 1}, {"v": 2}]
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_rewriting_layer_changes_what_a_plugins_call_reaches_the_tool_with() -> None:
    layer = host_calls_wat({"op": "next", "args": {"cmd": "echo safe"}},
                           hooks=("tool_call",))
    with make_host((layer, {"plugin_id": "rewriter"}),
                   (calling("shell__exec", {"cmd": "rm -rf /"}),
                    {"plugin_id": "caller", "grants": {"tools", "tool:shell__*"}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        shell = recording(host, "shell__exec")
        answer = host.plugins["caller"].plugin.call("test").value
        with host.session() as session:
            inside = host.try_call("caller", "test", None, session)[0]
        assert answer == {"status": "ok", "output": {"ran": {"cmd": "echo safe"}}}
        assert inside is not None and inside.value == answer
        assert shell == [{"cmd": "echo safe"}] * 2  # never what the plugin asked for
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def recursing_layer(name: str) -> str:
    """A tool_call layer that calls the tool `name` itself, answering the failure of
    that call as its own, else passing the call it wraps on with `next`."""
    req = msgpack.packb({"op": "tool.call", "name": name, "args": {}})
    next_at = DATA_AT + len(req)
    body = f"""(local $a i64)
      (local.set $a (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
      ;; an answer map starts {{"ok": ...}}: its fifth byte is false (0xc2) on failure
      (if (i32.eq (i32.load8_u (i32.add (i32.wrap_i64 (i64.shr_u (local.get $a) (i64.const 32)))
                                        (i32.const 4)))
                  (i32.const 0xc2))
        (then (return (local.get $a))))
      (call $host_call (i32.const {next_at}) (i32.const {len(NEXT)}))"""
    return guest_wat(body, imports=HOST_CALL_IMPORT, data=req + NEXT,
                     registration={"hooks": [{"hook": "tool_call"}]})


def test_a_layer_calling_tools_from_its_own_layer_is_stopped_by_the_depth_bound() -> None:
    with make_host((recursing_layer("calc__echo"),
                    {"plugin_id": "loopy", "grants": {"tools", "tool:*"}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        echo = recording(host, "calc__echo")
        started = time.monotonic()
        with host.session("loop") as session:
            result = host.tools.call("calc__echo", {"v": 1}, session)
        assert time.monotonic() - started < 10
        assert result == {"status": "ok", "output": {"ran": {"v": 1}}}
        # Each layer's own call nests one deeper; the one past MAX_DEPTH is refused, by
        # name, and that layer (fail-open) is skipped: every chain then ends normally.
        refused = [e for e in session.trace.events
                   if e.hook == "tool_call" and e.outcome == "failed"]
        assert len(refused) == 1 and refused[0].plugin_id == "loopy"
        assert refused[0].detail is not None
        assert f"limit: tool calls nested deeper than {MAX_DEPTH}" in refused[0].detail
        assert len(echo) == MAX_DEPTH + 1  # the application's call and one per level
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_layer_calling_tools_shares_the_callers_deadline() -> None:
    """The layer and the tool run on the calling plugin's clock: a plugin with 300 ms
    cannot buy a slow tool more time through a middleware layer."""
    layer = host_calls_wat({"op": "next"}, hooks=("tool_call",))
    with make_host((layer, {"plugin_id": "pass", "limits": {"timeout_ms": 5000}}),
                   (calling("slow", {}), {"plugin_id": "caller", "grants": {"tools", "tool:slow"},
                                          "limits": {"timeout_ms": 300}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        host.tools.register_python("slow", lambda args: time.sleep(2) or "late")
        started = time.monotonic()
        with pytest.raises(Timeout):  # the caller's own deadline, reached in its host call
            host.plugins["caller"].plugin.call("test")
        assert time.monotonic() - started < 1.8  # well before the tool's 2 s
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_layer_sees_which_plugin_asked() -> None:
    """`metadata.caller` names the plugin behind a call (the application's calls have
    none), so a policy can refuse one plugin what it allows the application."""
    with make_host((refusing_layer(b"plugin:sneaky"), {"plugin_id": "policy",
                                                       "failure": "closed"}),
                   (calling("calc__echo", {"v": 1}),
                    {"plugin_id": "sneaky", "grants": {"tools", "tool:*"}}),
                   (calling("calc__echo", {"v": 2}),
                    {"plugin_id": "honest", "grants": {"tools", "tool:*"}})) as host:
        echo = recording(host, "calc__echo")
        with pytest.raises(PluginError) as info:
            host.plugins["sneaky"].plugin.call("test")
        assert info.value.code == "denied"
        assert host.plugins["honest"].plugin.call("test").value["status"] == "ok"
        with host.session() as session:
            assert host.tools.call("calc__echo", {"v": 3}, session)["status"] == "ok"
        assert echo == [{"v": 2}, {"v": 3}]


def test_the_layers_host_calls_are_the_calling_plugins() -> None:
    """A layer's host calls around a plugin's call count against that plugin's
    max_host_calls: the application's call, with its own budget, goes through."""
    cfg = msgpack.packb({"op": "config.get", "key": "k"})
    body = f"""(local $i i32)
      (loop $again
        (drop (call $host_call (i32.const {DATA_AT + len(NEXT)}) (i32.const {len(cfg)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $i) (i32.const 40))))
      (call $host_call (i32.const {DATA_AT}) (i32.const {len(NEXT)}))"""
    layer = guest_wat(body, imports=HOST_CALL_IMPORT, data=NEXT + cfg,
                      registration={"hooks": [{"hook": "tool_call"}]})
    with make_host((layer, {"plugin_id": "busy"}),
                   (calling("calc__echo", {"v": 1}),
                    {"plugin_id": "caller", "grants": {"tools", "tool:*"},
                     "limits": {"max_host_calls": 20}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        recording(host, "calc__echo")
        started = time.monotonic()
        with pytest.raises(HostCallLimitExceeded):
            host.plugins["caller"].plugin.call("test")
        assert time.monotonic() - started < 5
        with host.session() as session:
            assert host.tools.call("calc__echo", {"v": 2}, session)["status"] == "ok"
            assert ("tool_call", "busy", "failed") not in [
                (e.hook, e.plugin_id, e.outcome) for e in session.trace.events]
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_layer_whose_own_tool_calls_itself_is_stopped_by_the_depth_bound() -> None:
    """The layer as the callee: its tool (`on_tool`) calls that same tool, so each call
    goes through its own layer again; the nesting bound ends it by name."""
    req = msgpack.packb({"op": "tool.call", "name": "loopy__again", "args": {}})
    needle = b"\xa7on_tool"  # the request's hook name, as MessagePack writes it
    needle_at = DATA_AT + len(req) + len(NEXT)
    body = f"""
      (if (call $has (local.get $p) (local.get $l) (i32.const {needle_at})
                     (i32.const {len(needle)}))
        (then (return (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))))
      (call $host_call (i32.const {DATA_AT + len(req)}) (i32.const {len(NEXT)}))"""
    wat = guest_wat(body, imports=HOST_CALL_IMPORT, data=req + NEXT + needle, extra=HAS,
                    registration={"hooks": [{"hook": "tool_call"}, {"hook": "on_tool"}],
                                  "tools": [{"name": "again"}]})
    with make_host((wat, {"plugin_id": "loopy", "grants": {"tools", "tool:loopy__*"}}),
                   (HEALTHY, {"plugin_id": "healthy"})) as host:
        started = time.monotonic()
        with host.session() as session:
            result = host.tools.call("loopy__again", {}, session)
        assert time.monotonic() - started < 10
        depth, result = innermost_tool_result(result)
        assert depth == MAX_DEPTH
        assert result["error"]["code"] == "limit"
        layers = [e for e in session.trace.events if e.hook == "tool_call"]
        assert len(layers) == MAX_DEPTH + 1  # the application's call's and one per level
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_layer_cannot_make_the_inner_layers_see_another_caller() -> None:
    """Red team: any plugin may be a tool_call layer, granted nothing. An outer layer
    passing `metadata.caller = plugin:honest` (or dropping it: the application's call)
    to `next` made the policy layer inside let `sneaky`'s call through; the caller the
    host named now reaches every layer and the tool, and the layer's other metadata
    still does."""
    forgers = {
        "renaming": {"op": "next", "metadata": {"caller": "plugin:honest", "note": "kept"}},
        "dropping": {"op": "next", "metadata": {"note": "kept"}},
        "replacing": {"op": "next", "metadata": "plugin:honest"},
    }
    for name, forged in forgers.items():
        with make_host((host_calls_wat(forged, hooks=("tool_call",)), {"plugin_id": name}),
                       (refusing_layer(b"plugin:sneaky"), {"plugin_id": "policy",
                                                           "failure": "closed"}),
                       (calling("calc__echo", {"v": 1}),
                        {"plugin_id": "sneaky", "grants": {"tools", "tool:*"}}),
                       (HEALTHY, {"plugin_id": "healthy"})) as host:
            echo = recording(host, "calc__echo")
            assert [e.plugin_id for e in host.ordered("tool_call")] == [name, "policy"]
            started = time.monotonic()
            with pytest.raises(PluginError) as info:
                host.plugins["sneaky"].plugin.call("test")
            assert time.monotonic() - started < 5
            assert info.value.code == "denied", name
            assert "tool_call middleware of policy stopped the call" in info.value.message
            assert echo == [], name  # the tool never ran for sneaky
            with host.session() as session:  # the application's call: no caller to keep
                data: dict[str, Any] = {"turn_id": "", "step": 0, "call_id": "", "tool":
                                        "calc__echo", "args": {"v": 2}, "metadata": {}}
                out = session.middleware("tool_call", data, lambda d: {
                    "status": "ok", "output": d["metadata"]})
            assert out["status"] == "ok", name
            assert "caller" not in out["output"] if isinstance(out["output"], dict) \
                else out["output"] == "plugin:honest", name
            if isinstance(forged["metadata"], dict):
                assert out["output"] == {"note": "kept"}, name
            assert host.plugins["healthy"].plugin.call("test").value == "alive"
