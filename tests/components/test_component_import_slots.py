"""What the core instances of a component declare costs every instance of it, outside
`memory_bytes`: each import is a slot of up to 32 bytes in its core instance's metadata,
each global 16 bytes, and a core module instantiated twice holds both twice. One module
of 99,000 imports instantiated 60 times made each instance of the component 180 MiB (and
loading the compiled component cost the host 179 MiB); nested components instantiated
twice, 22 levels deep, made a 1.2 KB component plan 4 million core instances (4.5 s and
730 MiB to compile, a 43 MiB artifact, and not one instance: the store allows 64).

`ModuleCaps.check_component` walks the component's index spaces and refuses, before the
child compile, more import slots than `max_component_import_slots`, more globals than
`max_globals`, or more core instances than MAX_CORE_INSTANCES. Core exports, export
names and aliases cost an instance nothing measurable (99,000 of each: under 0.3 MiB an
instance), so they are not capped here: the bytes (`max_module_bytes`) bound what
loading them costs the host. Tables cost nothing until filled, and filled ones are
bounded by their count (test_component_tables.py).
"""

from __future__ import annotations

import time

import pytest
import wasmtime

from support import Built, refused_at_load, uleb128
from wasmext import InvalidModule, ModuleTooLarge, Plugin, Runtime
from wasmext.sandbox.componentwalk import plan
from wasmext.sandbox.wasmcheck import (
    MAX_COMPONENT_MEMORIES,
    MAX_COMPONENT_NESTING,
    MAX_COMPONENT_TABLES,
    MAX_CORE_INSTANCES,
    ModuleCaps,
)

BOUND_S = 10.0  # a refusal reads section headers; the machine running CI is shared
_PING = '''(core module $p (func (export "ping") (result i32) i32.const 7))
    (core instance $pi (instantiate $p))
    (func (export "ping") (result u32) (canon lift (core func $pi "ping")))'''


def _importer(imports: int, copies: int, globals_: int = 0) -> bytes:
    """A component whose core module of `imports` function imports (and `globals_`
    globals) is instantiated `copies` times, and which exports `ping` (a plugin)."""
    names = "".join(f'(import "m" "f{i}" (func))' for i in range(imports))
    bag = "".join(f'(export "f{i}" (func $f))' for i in range(imports))
    held = "(global i32 (i32.const 0))" * globals_
    made = "".join('(core instance (instantiate $b (with "m" (instance $m))))'
                   for _ in range(copies))
    return bytes(wasmtime.wat2wasm(f'''(component
      (core module $a (func (export "f")))
      (core module $b {names} {held})
      (core instance $ia (instantiate $a))
      (alias core export $ia "f" (core func $f))
      (core instance $m {bag})
      {made}
      {_PING})'''))


def _doubling(levels: int, times: int = 2) -> bytes:
    """A component whose nested components each instantiate the one inside `times`
    times, `levels` deep, around one core instance: times**levels of them in all."""
    inner = '(component $c0 (core module $m) (core instance (instantiate $m)))'
    for level in range(1, levels + 1):
        made = f'(instance (instantiate $c{level - 1}))' * times
        inner = f'(component $c{level} {inner} {made})'
    return bytes(wasmtime.wat2wasm(f'(component {inner} (instance (instantiate '
                                   f'$c{levels})) {_PING})'))


@pytest.mark.parametrize(("component", "refusal"), [
    (lambda: _importer(99_000, 60), "5940000 import slots in its core instances, over "
     "the host's max_component_import_slots 50000"),  # the measured one: 180 MiB each
    (lambda: _importer(2_000, 26), "52000 import slots in its core instances, over the "
     "host's max_component_import_slots 50000"),  # just over, in small modules
    (lambda: _importer(0, 3, globals_=4_000), "12000 globals in its core instances, "
     "over the host's max_globals 10000"),  # 4,000 in the one module: instantiated thrice
    # 22 levels: 4 million core instances planned (4.5 s and 730 MiB to compile).
    (lambda: _doubling(22), f"nests components more than {MAX_COMPONENT_NESTING} deep"),
    # As deep as the host reads (c0 inside 15 levels inside the component itself).
    (lambda: _doubling(MAX_COMPONENT_NESTING - 1), f"plans {2**15 + 1} core "
     f"instances .*over the {MAX_CORE_INSTANCES} an instance of a component may make"),
    (lambda: _doubling(4, times=1_000), f"plans {1_000**4 + 1} core instances"),
    (lambda: _doubling(6), f"plans {2**6 + 1} core instances"),  # just over
], ids=["measured-imports", "just-over-imports", "globals-thrice", "too-deep", "doubling",
        "thousandfold", "doubling-just-over"])
def test_what_every_instance_would_hold_is_refused_before_compiling(
        runtime: Runtime, healthy: Plugin, component: object, refusal: str) -> None:
    assert callable(component)
    refused_at_load(runtime, component(), refusal, healthy, plugin_id="declared")


@pytest.mark.parametrize("component", [
    lambda: _importer(49_000, 1),  # a module at its validator's limit would be 100,000
    lambda: _importer(1_000, 49),
    lambda: _doubling(5),  # 33 core instances
], ids=["one-module", "many-instances", "doubling"])
def test_just_under_the_caps_loads_and_answers(runtime: Runtime, healthy: Plugin,
                                               component: object) -> None:
    assert callable(component)
    plugin = runtime.load(component(), plugin_id="under")
    assert plugin.call("on_tool", {"name": "ping", "args": {}}).value == {"result": 7}
    assert healthy.call("test", "ping").value == "alive"


def test_a_component_passed_in_to_be_instantiated_is_counted_where_it_is_defined(
        runtime: Runtime, healthy: Plugin) -> None:
    # The runner instantiates what it imports, which the walk does not follow; the
    # thousandfold component it is given is counted where it is defined.
    chain = '(component $c0 (core module $m) (core instance (instantiate $m)))'
    for level in range(1, 5):
        chain = (f'(component $c{level} {chain} '
                 f'{f"(instance (instantiate $c{level - 1}))" * 1_000})')
    wasm = bytes(wasmtime.wat2wasm(f'''(component {chain}
      (component $runner (import "x" (component)) (instance (instantiate 0)))
      (instance (instantiate $runner (with "x" (component $c4))))
      {_PING})'''))
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge, match=f"plans {1_000**4} core instances"):
        runtime.load(wasm, plugin_id="passed")
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", "ping").value == "alive"


def test_a_stricter_host_refuses_fewer_slots() -> None:
    component = _importer(100, 3)  # three instances of a module of 100 imports
    ModuleCaps(max_component_import_slots=300).check_component(component, "default")
    with pytest.raises(ModuleTooLarge, match="300 import slots in its core instances, "
                       "over the host's max_component_import_slots 299"):
        ModuleCaps(max_component_import_slots=299).check_component(component, "strict")


def test_a_module_passed_to_a_nested_component_is_bounded_by_the_largest() -> None:
    # The nested component imports the module its parent passes: the walk does not
    # follow it there, and counts the largest module of the component in its place.
    wasm = bytes(wasmtime.wat2wasm('''(component
      (core module $big (import "m" "a" (func)) (import "m" "b" (func)))
      (component $c
        (import "big" (core module $in (import "m" "a" (func)) (import "m" "b" (func))))
        (core module $a (func (export "a")) (func (export "b")))
        (core instance $ia (instantiate $a))
        (core instance (instantiate $in (with "m" (instance $ia)))))
      (instance (instantiate $c (with "big" (core module $big)))))'''))
    with pytest.raises(ModuleTooLarge, match="up to 2 import slots"):
        ModuleCaps(max_component_import_slots=1).check_component(wasm, "passed")
    ModuleCaps(max_component_import_slots=2).check_component(wasm, "passed")


def test_a_walk_past_its_budget_bounds_the_component_as_unfollowed() -> None:
    # 100,001 aliases (the walk follows 100,000 entries) before a module of 1,000 imports
    # made once: counted as the store's 64 instances of it.
    aliases = "(alias core export $ia \"f\" (core func))" * 100_001
    wasm = bytes(wasmtime.wat2wasm(f'''(component
      (core module $a (func (export "f")))
      (core instance $ia (instantiate $a))
      {aliases}
      (core module $b
        {"".join(f'(import "m" "f{i}" (func))' for i in range(1_000))})
      (core instance $m {"".join(f'(export "f{i}" (func $ia "f"))' for i in range(1_000))})
      (core instance (instantiate $b (with "m" (instance $m)))))'''))
    with pytest.raises(ModuleTooLarge, match=f"up to {MAX_CORE_INSTANCES * 1_000} import "
                       "slots"):
        ModuleCaps(max_component_import_slots=MAX_CORE_INSTANCES * 1_000 - 1
                   ).check_component(wasm, "long")


def test_a_component_of_millions_of_entries_is_read_within_the_bound(
        runtime: Runtime, healthy: Plugin) -> None:
    # 8 million four-byte aliases (30 MiB, under max_module_bytes): following each took
    # the walk 17 s of the host's CPU before the child compile.
    count = 7_900_000
    body = uleb128(count) + b"\x01\x00\x00\x00" * count  # a func of instance 0, named ""
    wasm = (b"\0asm\x0d\x00\x01\x00" + b"\x06" + uleb128(len(body)) + body)
    started = time.monotonic()
    with pytest.raises(InvalidModule):  # no instance 0: wasmtime's validator says so
        runtime.load(wasm, plugin_id="aliases")
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", "ping").value == "alive"


def test_core_modules_of_millions_of_imports_are_refused_before_the_walk(
        runtime: Runtime, healthy: Plugin) -> None:
    # Seven modules of a million four-byte imports each (28 MB): each as many as wasmtime
    # accepts, and about a second apiece to walk.
    count = 1_000_000
    imports = uleb128(count) + b"\x00\x00\x00\x00" * count  # "" "" (func 0)
    core = b"\0asm\x01\0\0\0" + b"\x02" + uleb128(len(imports)) + imports
    wasm = b"\0asm\x0d\x00\x01\x00" + (b"\x01" + uleb128(len(core)) + core) * 7
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge, match="7000000 imports and exports in its core "
                       "modules, over the 500000 the host reads"):
        runtime.load(wasm, plugin_id="walked")
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", "ping").value == "alive"


def test_the_python_sdks_component_is_far_under_the_caps(components: Built, crt: Runtime
                                                         ) -> None:
    # 14 core instances, 2,255 imports and 1,893 globals among them: the caps are 22
    # and 5 times that. Two tables (MAX_COMPONENT_TABLES: 4), one memory.
    (built,) = components["conformance-python"].glob("*.wasm")
    planned, _ = plan(built.read_bytes(), (0, 0, 0, 0))
    assert (planned.instances, planned.tables, planned.memories, planned.exact) == (
        14, 2, 1, True)
    assert planned.tables <= MAX_COMPONENT_TABLES
    ModuleCaps(max_component_import_slots=2_255, max_globals=1_893).check_component(
        built.read_bytes(), "py")
    with pytest.raises(ModuleTooLarge, match="2255 import slots"):
        ModuleCaps(max_component_import_slots=2_254).check_component(built.read_bytes(), "py")
    assert crt.load(components["conformance-python"]).call("echo", "Bo").value == "Bo"


def _growers(memories: int) -> bytes:
    """A component of `memories` core modules, each defining a memory of one page, with
    a tool `grow<i>` (pages: u32) that grows the i-th and answers memory.grow's result."""
    parts = "".join(f'''
      (core module $m{i} (memory 1)
        (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
      (core instance $i{i} (instantiate $m{i}))
      (func (export "grow{i}") (param "pages" u32) (result s32)
        (canon lift (core func $i{i} "grow")))''' for i in range(memories))
    return bytes(wasmtime.wat2wasm(f"(component {parts})"))


def _grow(plugin: Plugin, memory: int, pages: int) -> int:
    answer = plugin.call("on_tool", {"name": f"grow{memory}", "args": {"pages": pages}})
    return int(answer.value["result"])


@pytest.mark.parametrize("memories", [2, 16])
def test_a_component_of_more_than_one_memory_is_refused_before_compiling(
        runtime: Runtime, healthy: Plugin, memories: int) -> None:
    # The store limiter caps each memory at memory_bytes, not their sum: three memories
    # of a component each grew to a 16 MiB cap, 48 MiB in all.
    refused_at_load(runtime, _growers(memories),
                    f"{memories} linear memories in its core instances, over the "
                    f"{MAX_COMPONENT_MEMORIES} an instance", healthy, plugin_id="memories")


def test_a_components_one_memory_grows_to_memory_bytes_and_no_further(
        runtime: Runtime, healthy: Plugin) -> None:
    plugin = runtime.load(_growers(1), plugin_id="one-memory",
                          limits={"memory_bytes": 16 * 2**20})
    assert _grow(plugin, 0, 255) == 1  # 256 pages of 64 KiB: the whole 16 MiB
    assert _grow(plugin, 0, 1) == -1  # memory.grow's refusal, as the guest sees it
    assert healthy.call("test", "ping").value == "alive"
