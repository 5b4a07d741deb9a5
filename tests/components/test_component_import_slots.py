"""Every import of a component's core instance is a 32-byte slot in that instance's
metadata, outside `memory_bytes`: one core module of 99,000 imports instantiated 60
times made each instance of the component 180 MiB, and loading the compiled component
cost the host 179 MiB. `ModuleCaps.check_component` bounds the slots (the largest core
module's imports times the core instances made) by `max_component_import_slots`, before
the child compile. Core exports, export names, aliases and tables cost an instance
nothing measurable (99,000 of each: under 0.3 MiB an instance), so they are not capped.
"""

from __future__ import annotations

import time

import pytest
import wasmtime

from support import Built, rss_mib
from wasmext import ModuleTooLarge, Plugin, Runtime
from wasmext.sandbox.wasmcheck import ModuleCaps

BOUND_S = 10.0  # a refusal reads section headers; the machine running CI is shared
GROWTH_MIB = 32  # what a refused load may add to the process (the bytes, mostly)


def _importer(imports: int, copies: int, nested: bool = False) -> bytes:
    """A component whose core module of `imports` function imports is instantiated
    `copies` times (inside a nested component, instantiated once, when `nested`), and
    which exports `ping` so that it is a plugin."""
    names = "".join(f'(import "m" "f{i}" (func))' for i in range(imports))
    bag = "".join(f'(export "f{i}" (func $f))' for i in range(imports))
    made = "".join('(core instance (instantiate $b (with "m" (instance $m))))'
                   for _ in range(copies))
    inner = f'''
      (core module $a (func (export "f")) (func (export "ping") (result i32) i32.const 7))
      (core module $b {names})
      (core instance $ia (instantiate $a))
      (alias core export $ia "f" (core func $f))
      (core instance $m {bag})
      {made}'''
    if nested:
        inner = f'(component $c {inner}) (instance (instantiate $c))'
        ping = "(core module $p (func (export \"ping\") (result i32) i32.const 7))" \
               "(core instance $ia (instantiate $p))"
        inner += ping
    return bytes(wasmtime.wat2wasm(f'''(component {inner}
      (func (export "ping") (result u32) (canon lift (core func $ia "ping"))))'''))


@pytest.mark.parametrize(("imports", "copies", "nested", "slots"), [
    (99_000, 60, False, 6_039_000),  # the measured one: 180 MiB an instance
    (2_000, 50, False, 102_000),  # just over, in small modules
    (2_000, 1, True, 128_000),  # a nested component's instances may repeat: the store's 64
], ids=["measured", "just-over", "nested"])
def test_a_component_with_too_many_import_slots_is_refused_before_compiling(
        runtime: Runtime, healthy: Plugin, imports: int, copies: int, nested: bool,
        slots: int) -> None:
    component = _importer(imports, copies, nested)
    before = rss_mib()
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge, match=f"up to {slots} import slots in its core "
                       "instances .*max_component_import_slots 100000"):
        runtime.load(component, plugin_id="slots")
    assert time.monotonic() - started < BOUND_S
    assert rss_mib() - before < GROWTH_MIB
    assert healthy.call("test", "ping").value == "alive"


def test_the_most_imports_one_core_module_may_have_load_and_run(runtime: Runtime,
                                                                 healthy: Plugin) -> None:
    # 49,000 imports in one module, one instance of it beside the exporter's: under the
    # cap (the bound counts each instance as the largest module's), about 2 MiB an instance.
    component = _importer(49_000, 1)
    ModuleCaps().check_component(component, "one")
    plugin = runtime.load(component, plugin_id="many-imports")
    assert plugin.call("on_tool", {"name": "ping", "args": {}}).value == {"result": 7}
    assert healthy.call("test", "ping").value == "alive"


def test_a_stricter_host_refuses_fewer_slots() -> None:
    component = _importer(100, 3)  # four core instances (the exporter's too): 400 slots
    ModuleCaps(max_component_import_slots=400).check_component(component, "default")
    with pytest.raises(ModuleTooLarge, match=r"up to 400 import slots .*"
                       r"max_component_import_slots 399"):
        ModuleCaps(max_component_import_slots=399).check_component(component, "strict")


def test_the_python_sdks_component_is_far_under_the_cap(components: Built, crt: Runtime
                                                        ) -> None:
    # 14 core instances, 918 imports in the largest module: 12,852 slots by the bound.
    (built,) = components["conformance-python"].glob("*.wasm")
    ModuleCaps(max_component_import_slots=20_000).check_component(built.read_bytes(), "py")
    assert crt.load(components["conformance-python"]).call("echo", "Bo").value == "Bo"
