"""Extism-ABI modules behind the same plugin interface: limits, grants, faults."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgpack
import pytest
import wasmtime

from support import Built
from wasmext import (
    CapabilityDenied,
    GuestTrap,
    HostConfig,
    OutOfFuel,
    Runtime,
    Timeout,
    WasmextError,
)
from wasmext.sandbox.backends.extism import ExtismPlugin
from wasmext.testing import make_host

pytestmark = pytest.mark.skipif(importlib.util.find_spec("extism") is None,
                                reason="the extism package is not installed")

KERNEL = """
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
"""
COPY_INPUT = """
    (local $n i64) (local $i i64) (local $block i64)
    (local.set $n (call $input_length))
    (local.set $block (call $alloc (local.get $n)))
    (block $done (loop $copy
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $block) (local.get $i))
                      (call $input_load_u8 (local.get $i)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $copy)))
"""


def module(extra_imports: str = "", body: str = "", funcs: str = "") -> bytes:
    wat = f"""(module {KERNEL} {extra_imports}
  (func (export "echo") (result i32) {COPY_INPUT}
    (call $output_set (local.get $block) (local.get $n)) (i32.const 0))
  (func (export "spin") (result i32) (loop (br 0)) (i32.const 0))
  {funcs}
)"""
    return bytes(wasmtime.wat2wasm(wat))


def test_echo_through_the_extism_sdk(runtime: Runtime) -> None:
    plugin = runtime.load(module(), plugin_id="ext")
    assert isinstance(plugin, ExtismPlugin)
    assert {h.hook for h in plugin.registration.hooks} == {"echo", "spin"}
    assert plugin.call("echo", {"a": [1, 2]}).value == {"a": [1, 2]}
    assert plugin.call("echo", "plain text").value == "plain text"
    assert plugin.describe()["backend"] == "extism"


def test_fuel_limit_applies_per_call(runtime: Runtime) -> None:
    plugin = runtime.load(module(), plugin_id="ext", limits={"fuel_per_call": 200_000,
                                                            "timeout_ms": 60_000})
    with pytest.raises(OutOfFuel):
        plugin.call("spin", "")
    # A fresh budget: a small call after the fault still runs.
    assert plugin.call("echo", "ok").value == "ok"


def test_timeout(runtime: Runtime) -> None:
    plugin = runtime.load(module(), plugin_id="ext", limits={"fuel_per_call": 10**12,
                                                            "timeout_ms": 50})
    with pytest.raises(Timeout):
        plugin.call("spin", "")


def test_a_call_timeout_below_the_loads_stops_the_guest(runtime: Runtime) -> None:
    """set_call_limits(timeout_ms=) (`wasmext call --timeout-ms`) after a load with a
    minute: the SDK's own timeout is the load's, so the guest is interrupted at the
    call's 50 ms, named, and the plugin answers afterwards."""
    import time

    plugin = runtime.load(module(), plugin_id="ext", limits={"fuel_per_call": 10**12,
                                                            "timeout_ms": 60_000})
    plugin.set_call_limits(timeout_ms=50)
    started = time.monotonic()
    with pytest.raises(Timeout, match="50 ms"):
        plugin.call("spin", "")
    assert time.monotonic() - started < 10  # the call's deadline, not the load's minute
    assert plugin.call("echo", "ok").value == "ok"


def test_only_granted_host_functions_are_linked(runtime: Runtime) -> None:
    wasm = module('(import "extism:host/user" "wasmext_state_get" '
                  '(func $get (param i64) (result i64)))')
    with pytest.raises(CapabilityDenied, match="not granted"):
        runtime.load(wasm, plugin_id="ext")


HOST_CALL = ('(import "extism:host/user" "wasmext_host_call" '
             '(func $host_call (param i64) (result i64)))')
FORWARD = """
  (func (export "forward") (result i32)""" + COPY_INPUT + """
    (local.set $block (call $host_call (local.get $block)))
    (call $output_set (local.get $block) (call $length (local.get $block)))
    (i32.const 0))"""
LENGTH = '(import "extism:host/env" "length" (func $length (param i64) (result i64)))'


def test_generic_host_call(runtime: Runtime) -> None:
    wasm = module(HOST_CALL + LENGTH, funcs=FORWARD)
    plugin = runtime.load(wasm, plugin_id="ext", settings={"greeting": "Moin"})
    answer = msgpack.unpackb(plugin.call("forward", msgpack.packb(
        {"op": "config.get", "key": "greeting"})).value)
    assert answer == {"ok": True, "value": "Moin"}
    denied = msgpack.unpackb(plugin.call("forward", msgpack.packb(
        {"op": "state.get", "key": "k"})).value)
    assert denied["error"]["code"] == "denied"


def test_host_function_errors_are_raised_not_swallowed(runtime: Runtime) -> None:
    setter = ('(import "extism:host/user" "wasmext_state_set" '
              '(func $set (param i64 i64)))')
    funcs = """
  (func (export "store") (result i32)""" + COPY_INPUT + """
    (call $set (local.get $block) (local.get $block))
    (i32.const 0))"""
    plugin = runtime.load(module(setter, funcs=funcs), plugin_id="ext", grants={"state"})
    with pytest.raises(WasmextError, match="JSONDecodeError"):
        plugin.call("store", "not json")
    with pytest.raises(WasmextError, match=r"state\.set: unsupported"):
        plugin.call("store", '"valid json"')
    assert plugin.call("echo", "still serving").value == "still serving"


def test_as_pdk_plugin_uses_wasmext_state_and_log(built: Built, tmp_path: Path) -> None:
    """A real @extism/as-pdk build: state survives calls of a session, logs arrive."""
    host = make_host((built["extism-counter"], {"grants": {"state"}}),
                     config=HostConfig(data_dir=tmp_path, state_backend="memory"))
    with host:
        plugin = host.plugins["extism-counter"].plugin
        assert isinstance(plugin, ExtismPlugin)
        values = [plugin.call("count", "visits", {"session": "s1"}).value for _ in range(3)]
        assert values == [1, 2, 3]
        assert plugin.call("count", "visits", {"session": "s2"}).value == 1
        assert [ln.text for ln in plugin.log.lines][-1] == "counter visits is now 1"
    with pytest.raises(CapabilityDenied):
        make_host((built["extism-counter"], {}))


def test_conformance_on_the_extism_backend(built: Built, runtime: Runtime) -> None:
    """The conformance behaviours, as far as the Extism ABI can carry them."""
    plugin = runtime.load(built["extism-conformance"], settings={"greeting": "Servus"})
    assert isinstance(plugin, ExtismPlugin)
    for value in ({"a": [1, 2.5, None, True]}, [1, "two"], 42, "héllo ✓ 😀"):
        assert plugin.call("echo", value).value == value
    assert plugin.call("echo", b"\xff\x00\xfe").value == b"\xff\x00\xfe"
    assert plugin.call("config", "greeting").value == "Servus"
    plugin.call("log", "from the extism plugin")
    assert plugin.log.lines[-1].text == "from the extism plugin"
    answers = {op: msgpack.unpackb(plugin.call("host", msgpack.packb(req)).value)
               for op, req in {"config": {"op": "config.get", "key": "greeting"},
                               "unknown": {"op": "no.such"},
                               "denied": {"op": "state.get", "key": "k"}}.items()}
    assert answers["config"] == {"ok": True, "value": "Servus"}
    assert answers["unknown"]["error"]["code"] == "unsupported"
    assert answers["denied"]["error"]["code"] == "denied"
    with pytest.raises(GuestTrap):
        plugin.call("fail", "")
    assert plugin.call("echo", "still serving").value == "still serving"
