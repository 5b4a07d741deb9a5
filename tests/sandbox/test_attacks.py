"""Hostile plugins, one per threat: each fails with its named error, within its
limits, and the same runtime keeps serving a healthy plugin afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgpack
import pytest
import wasmtime

from wasmext import (
    AbiMismatch,
    GuestTrap,
    HostCallLimitExceeded,
    InvalidModule,
    InvalidOutput,
    MemoryLimitExceeded,
    OutOfFuel,
    Plugin,
    PluginError,
    PluginFault,
    Quarantined,
    Runtime,
    StackOverflow,
    Timeout,
    UnknownImport,
)
from wasmext.sandbox.hostcalls import CallContext
from wasmext.sandbox.limits import WASM_PAGE
from wasmext.testing import DATA_AT, guest_wat, load_wat, packed

HOSTILE = json.loads((Path(__file__).resolve().parents[2] / "abi" / "vectors" /
                      "hostile.json").read_text())["hostile"]
HOST_CALL_IMPORT = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
# Generous: the limits under test are 50-1000 ms; this only catches a hang.
BOUND_S = 10.0


def attack(runtime: Runtime, healthy: Plugin, plugin: Plugin, error: type[PluginFault],
           data: object = "x") -> PluginFault:
    """Call `plugin`, expect `error`, check the bounds and that the host still serves."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        plugin.call("test", data)
    assert time.monotonic() - started < BOUND_S
    assert info.value.plugin_id == plugin.id
    assert info.value.hook == "test"
    assert healthy.call("test", "ping").value == "alive"
    # The faulted plugin itself is still callable: a fresh instance, the same verdict.
    with pytest.raises(error):
        plugin.call("test", data)
    assert healthy.call("test", "ping").value == "alive"
    return info.value


def test_infinite_loop_times_out(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"),
                      limits={"timeout_ms": 50, "fuel_per_call": 10**10})
    err = attack(runtime, healthy, plugin, Timeout)
    assert err.reason == "timeout"


def test_infinite_loop_runs_out_of_fuel(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"),
                      limits={"fuel_per_call": 100_000, "timeout_ms": 60_000})
    assert attack(runtime, healthy, plugin, OutOfFuel).reason == "out of fuel"


def test_fuel_is_fresh_for_every_call(runtime: Runtime) -> None:
    # Each call burns ~60% of the budget: two calls would exhaust one shared budget.
    body = """(local $i i32) (local.set $i (i32.const 20000))
      (loop $l (local.set $i (i32.sub (local.get $i) (i32.const 1)))
               (br_if $l (local.get $i)))
      (i64.const 0)"""
    plugin = load_wat(runtime, guest_wat(body), limits={"fuel_per_call": 150_000})
    for _ in range(5):
        assert plugin.call("test", 1).changed is False


def test_memory_grow_bomb(runtime: Runtime, healthy: Plugin) -> None:
    body = """(loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
      unreachable"""
    cap = 8 * 2**20
    plugin = load_wat(runtime, guest_wat(body), limits={"memory_bytes": cap})
    attack(runtime, healthy, plugin, MemoryLimitExceeded)
    for inst in plugin._idle:
        assert inst.memory.size() <= cap


def test_huge_data_segment_is_refused_at_instantiation(runtime: Runtime, healthy: Plugin) -> None:
    pages = 2048  # 128 MiB of initial memory against a 16 MiB cap
    wat = guest_wat(memory_pages=pages, extra=f'(data (i32.const {(pages - 1) * WASM_PAGE}) "x")')
    with pytest.raises(MemoryLimitExceeded):
        load_wat(runtime, wat, limits={"memory_bytes": 16 * 2**20})
    assert healthy.call("test", 1).value == "alive"


def test_data_segment_outside_memory_is_a_trap(runtime: Runtime, healthy: Plugin) -> None:
    wat = guest_wat(extra=f'(data (i32.const {10 * WASM_PAGE}) "x")')
    with pytest.raises(GuestTrap):
        load_wat(runtime, wat)
    assert healthy.call("test", 1).value == "alive"


def test_deep_recursion(runtime: Runtime, healthy: Plugin) -> None:
    wat = guest_wat("(call $down (i32.const 0)) (i64.const 0)",
                    extra="(func $down (param i32) (call $down (i32.add (local.get 0) "
                          "(i32.const 1))))")
    plugin = load_wat(runtime, wat, limits={"fuel_per_call": 10**10, "timeout_ms": 10_000})
    assert attack(runtime, healthy, plugin, StackOverflow).reason == "stack overflow"


@pytest.mark.parametrize("ptr_len", [(0xFFFF0000, 16), (2 * WASM_PAGE - 4, 16),
                                     (0, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF)])
def test_output_out_of_bounds(runtime: Runtime, healthy: Plugin, ptr_len: tuple[int, int]) -> None:
    plugin = load_wat(runtime, guest_wat(f"(i64.const {packed(*ptr_len)})"))
    err = attack(runtime, healthy, plugin, InvalidOutput)
    assert err.reason == "invalid output"


def test_output_larger_than_cap(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, guest_wat(f"(i64.const {packed(0, 3 * WASM_PAGE)})",
                                         memory_pages=4),
                      limits={"max_output_bytes": 2 * WASM_PAGE})
    err = attack(runtime, healthy, plugin, InvalidOutput)
    assert "max_output_bytes" in str(err)


@pytest.mark.parametrize("vector", HOSTILE, ids=[v["name"] for v in HOSTILE])
def test_hostile_messagepack(runtime: Runtime, healthy: Plugin, vector: dict[str, str]) -> None:
    raw = bytes.fromhex(vector["hex"])
    body = f"(i64.const {packed(DATA_AT, len(raw))})"
    plugin = load_wat(runtime, guest_wat(body, data=raw or b"\0"))
    attack(runtime, healthy, plugin, InvalidOutput)


@pytest.mark.parametrize("response", [
    ["not", "a", "map"], {"ok": "yes"}, {"value": 1}, {"ok": False},
    {"ok": False, "error": "boom"}, {"ok": True, "stop": "no"}, {"ok": True, "meta": [1]},
])
def test_malformed_response_envelopes(runtime: Runtime, healthy: Plugin, response: object) -> None:
    plugin = load_wat(runtime, guest_wat(response=response))
    attack(runtime, healthy, plugin, InvalidOutput)


def test_unknown_import_is_refused_at_load(runtime: Runtime, healthy: Plugin) -> None:
    wat = guest_wat(imports='(import "env" "system" (func (param i32) (result i32)))')
    with pytest.raises(UnknownImport, match=r"env\.system"):
        load_wat(runtime, wat)
    assert healthy.call("test", 1).value == "alive"


def test_known_import_with_wrong_signature(runtime: Runtime) -> None:
    wat = guest_wat(imports='(import "wasmext" "host_call" (func (param i32) (result i32)))')
    with pytest.raises(AbiMismatch, match="host_call"):
        load_wat(runtime, wat)


def test_wrong_abi_version(runtime: Runtime, healthy: Plugin) -> None:
    with pytest.raises(AbiMismatch, match="major 2"):
        load_wat(runtime, guest_wat(abi_version=2))
    assert healthy.call("test", 1).value == "alive"


@pytest.mark.parametrize("missing", ["wasmext_call", "wasmext_alloc", "wasmext_register",
                                     "wasmext_abi_version", "memory"])
def test_missing_exports(runtime: Runtime, missing: str) -> None:
    wat = guest_wat().replace(f'(export "{missing}")', "")
    with pytest.raises(AbiMismatch, match=missing):
        load_wat(runtime, wat)


def test_wasi_command_is_refused(runtime: Runtime) -> None:
    with pytest.raises(AbiMismatch, match="_start"):
        load_wat(runtime, guest_wat(extra='(func (export "_start"))'))


def test_not_webassembly(runtime: Runtime) -> None:
    with pytest.raises(InvalidModule):
        runtime.load(b"\0asm\x01\0\0\0garbage", plugin_id="junk")
    with pytest.raises(InvalidModule):
        runtime.load(b"#!/bin/sh\necho pwned\n", plugin_id="junk")


def _log_request() -> bytes:
    return msgpack.packb({"op": "log", "msg": "spam"})


def test_host_call_flooding(runtime: Runtime, healthy: Plugin) -> None:
    req = _log_request()
    body = f"""(loop $l (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
                        (br $l))
      (i64.const 0)"""
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL_IMPORT, data=req),
                      limits={"max_host_calls": 100, "fuel_per_call": 10**10,
                              "timeout_ms": 60_000})
    err = attack(runtime, healthy, plugin, HostCallLimitExceeded)
    assert "100 host calls" in str(err)


def test_stalling_host_call(runtime: Runtime, healthy: Plugin) -> None:
    def stall(ctx: CallContext, req: dict[str, object]) -> None:
        time.sleep(0.03)

    runtime.services.register("x.stall", stall, capability="")
    req = msgpack.packb({"op": "x.stall"})
    body = f"""(loop $l (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
                        (br $l))
      (i64.const 0)"""
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL_IMPORT, data=req),
                      limits={"host_call_timeout_ms": 100, "timeout_ms": 60_000})
    err = attack(runtime, healthy, plugin, HostCallLimitExceeded)
    assert "100 ms" in str(err)


def test_trap_inside_alloc_during_host_call(runtime: Runtime, healthy: Plugin) -> None:
    req = _log_request()
    # The allocator works for the host's request buffer but traps once $armed is set.
    alloc = """(if (global.get $armed) (then unreachable))
        (i32.const 100000)"""
    body = f"""(global.set $armed (i32.const 1))
      (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))"""
    wat = guest_wat(body, imports=HOST_CALL_IMPORT, data=req, alloc_body=alloc, memory_pages=4,
                    extra="(global $armed (mut i32) (i32.const 0))")
    plugin = load_wat(runtime, wat)
    err = attack(runtime, healthy, plugin, GuestTrap)
    assert "wasmext_alloc during host_call" in str(err)


def test_host_call_request_out_of_bounds(runtime: Runtime, healthy: Plugin) -> None:
    body = "(call $host_call (i32.const -16) (i32.const 64))"
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL_IMPORT))
    attack(runtime, healthy, plugin, InvalidOutput)


def test_host_call_request_over_cap(runtime: Runtime, healthy: Plugin) -> None:
    body = "(call $host_call (i32.const 0) (i32.const 100000))"
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL_IMPORT, memory_pages=4),
                      limits={"max_host_request_bytes": 1024})
    attack(runtime, healthy, plugin, InvalidOutput)


def test_garbage_host_call_request_is_answered_not_trapped(runtime: Runtime) -> None:
    junk = b"\xc1\xc1\xc1"
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(junk)}))"
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL_IMPORT, data=junk))
    # The guest returns the host's answer as its own response: an `invalid` error.
    with pytest.raises(PluginError) as info:
        plugin.call("test", 1)
    assert info.value.code == "invalid"


def test_repeated_faults_quarantine_the_plugin(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, guest_wat("unreachable"))
    for _ in range(runtime.quarantine.max_faults):
        with pytest.raises(GuestTrap):
            plugin.call("test", 1)
    with pytest.raises(Quarantined):
        plugin.call("test", 1)
    assert plugin.quarantined
    assert healthy.call("test", 1).value == "alive"
    plugin.release_quarantine()
    with pytest.raises(GuestTrap):
        plugin.call("test", 1)


def test_guest_that_traps_in_register(runtime: Runtime) -> None:
    wat = guest_wat().replace(
        '(func (export "wasmext_register") (param i32 i32) (result i64)',
        '(func (export "wasmext_register") (param i32 i32) (result i64) unreachable')
    with pytest.raises(GuestTrap):
        load_wat(runtime, wat)


def test_wasm_threads_are_not_available(runtime: Runtime) -> None:
    wat = guest_wat().replace("(memory (export \"memory\") 2)",
                              "(memory (export \"memory\") 2 2 shared)")
    with pytest.raises((InvalidModule, wasmtime.WasmtimeError)):
        load_wat(runtime, wat)


def test_input_cap_holds_after_the_buffer_grew(runtime: Runtime) -> None:
    """A request over max_input_bytes is refused even when an earlier, smaller one
    made the guest's request buffer large enough to hold it."""
    from wasmext import InputTooLarge

    plugin = load_wat(runtime, guest_wat(), limits={"max_input_bytes": 5000})
    assert plugin.call("test", "x" * 4500).value == "ok"
    with pytest.raises(InputTooLarge):
        plugin.call("test", "x" * 4995)  # with the request map around it: over 5000 bytes
    assert plugin.call("test", "x" * 10).value == "ok"
