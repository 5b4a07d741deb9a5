"""Memories the ABI does not speak: a 64-bit memory (memory64) or several.

The ABI's pointers and lengths are i32 into the one exported memory (abi/SPEC.md 1),
and the store limiter caps each memory on its own, so a module with two memories had
twice `memory_bytes`, and a 64-bit one loaded although the host cannot address it.
Each is refused at load with `AbiMismatch`, in one line naming the plugin and why;
the engine leaves both features out, so wasmtime's validator refuses them too (the
only refusal a component's core modules meet).
"""

from __future__ import annotations

import time

import pytest
import wasmtime

from wasmext import AbiMismatch, Plugin, Runtime
from wasmext.sandbox.engine import shared_engine
from wasmext.sandbox.wasmcheck import inspect
from wasmext.testing import guest_wat, load_wat

BOUND_S = 10.0  # a load is milliseconds; this only catches a hang

# The ABI's exports, none of them touching memory: only the memory's type differs.
ABI_FUNCS = """
  (func (export "wasmext_abi_version") (result i32) (i32.const 1))
  (func (export "wasmext_alloc") (param i32) (result i32) (i32.const 0))
  (func (export "wasmext_register") (param i32 i32) (result i64) (i64.const 0))
  (func (export "wasmext_call") (param i32 i32) (result i64) (i64.const 0))"""

HOSTILE = {
    "defined-memory64": f'(module (memory (export "memory") i64 1) {ABI_FUNCS})',
    "imported-memory64": f'(module (import "env" "memory" (memory i64 1)) '
                         f'(export "memory" (memory 0)) {ABI_FUNCS})',
    "second-memory": guest_wat(extra="(memory $more 1024)"),
    "imported-second-memory": guest_wat(imports='(import "env" "more" (memory 1))'),
    # An Extism plugin is recognised by its kernel imports, then held to the same rule.
    "extism-memory64": '(module (import "extism:host/env" "input_length" '
                       '(func (result i64))) (memory (export "memory") i64 1))',
}
WHY = {
    "defined-memory64": "64-bit memory", "imported-memory64": "64-bit memory",
    "second-memory": "2 memories", "imported-second-memory": "2 memories",
    "extism-memory64": "64-bit memory",
}


def refused(runtime: Runtime, plugin_id: str, wat: str) -> AbiMismatch:
    """Load `wat`, expect AbiMismatch within the bound; the error."""
    started = time.monotonic()
    with pytest.raises(AbiMismatch) as info:
        load_wat(runtime, wat, plugin_id=plugin_id)
    assert time.monotonic() - started < BOUND_S
    return info.value


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_memory_the_abi_does_not_speak_is_refused_at_load(
        runtime: Runtime, healthy: Plugin, case: str) -> None:
    error = refused(runtime, case, HOSTILE[case])
    text = str(error)
    assert case in text and WHY[case] in text
    assert "\n" not in text and len(text) < 200
    assert "Caused by" not in text and "offset" not in text  # not wasmtime's raw words
    assert case not in runtime.plugins
    assert healthy.call("test", "ping").value == "alive"


def test_the_section_walk_reads_each_memorys_index_type() -> None:
    shape = inspect(bytes(wasmtime.wat2wasm(HOSTILE["imported-memory64"])))
    assert shape.memories == (True,)
    assert inspect(bytes(wasmtime.wat2wasm(guest_wat()))).memories == (False,)
    assert inspect(bytes(wasmtime.wat2wasm(HOSTILE["second-memory"]))).memories == (
        False, False)


@pytest.mark.parametrize("wat", [HOSTILE["defined-memory64"], HOSTILE["second-memory"]])
def test_the_engine_itself_refuses_both(wat: str) -> None:
    with pytest.raises(wasmtime.WasmtimeError):
        wasmtime.Module(shared_engine().engine, bytes(wasmtime.wat2wasm(wat)))


@pytest.mark.parametrize(("core", "why"), [
    ("(memory i64 1)", "64-bit memory"),
    ("(memory 1) (memory 1)", "more than one memory"),
])
def test_a_components_core_module_with_such_a_memory_is_refused(
        runtime: Runtime, healthy: Plugin, core: str, why: str) -> None:
    component = bytes(wasmtime.wat2wasm(f"(component (core module {core}))"))
    started = time.monotonic()
    with pytest.raises(AbiMismatch) as info:
        runtime.load(component, plugin_id="memory-trick")
    assert time.monotonic() - started < BOUND_S
    text = str(info.value)
    assert "memory-trick" in text and why in text
    assert "\n" not in text and "Caused by" not in text
    assert healthy.call("test", "ping").value == "alive"
