"""What a module declares, rather than what it runs, costs the host: refused at load.

Each global is 16 bytes of every instance's metadata, beside the memory that
`memory_bytes` caps: 999,000 globals made each instance about 16 MiB, times the instances
alive (a plugin keeps up to four idle; the pool holds thousands). Each import and export
is a name and a type the host reads into Python at load: 100,000 imports in a 1.4 MB
module took 3 s and 135 MiB to load, 100,000 long export names 1 s and 220 MiB. The
section walk (`sandbox.wasmcheck`) counts them and `ModuleCaps` refuses the module with
`ModuleTooLarge`, naming the limit, before wasmtime compiles anything.

Compile time is not proportional to the bytes either: 200 functions of 1,000 nested
loops (600 KB, inside every byte cap) compiled for minutes, 87,000 calls in one body
took 1.6 s and 186 MiB, 99,000 one-function element segments 4 s (0.4 MB, no code at
all). A module with more code and element segments than `ModuleCaps.inline_compile_bytes`
compiles in a child process (`sandbox.compiler`) under `compile_timeout_ms` and
`compile_memory_bytes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import wasmtime

from support import rss_mib, uleb128
from wasmext import InvalidModule, MemoryLimitExceeded, ModuleTooLarge, Plugin, Runtime
from wasmext.sandbox.cache import CompileCache
from wasmext.sandbox.engine import EngineConfig
from wasmext.sandbox.wasmcheck import ModuleCaps, inspect
from wasmext.testing import guest_wat

BOUND_S = 2.0  # a refusal reads section headers; a compile of these took seconds
GROWTH_MIB = 32  # what a refused load may add to the process (the module's bytes, mostly)
_SECTION_ORDER = (1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11)
_TYPE, _IMPORT, _FUNCTION, _GLOBAL, _EXPORT, _ELEMENT, _CODE = 1, 2, 3, 6, 7, 9, 10


def _read_uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _with_entries(wasm: bytes, section: int, entries: bytes, count: int) -> bytes:
    """`wasm` with `count` more entries (`entries`, encoded) at the end of `section`.

    Built as bytes: the text of a million globals takes wat2wasm longer than the test."""
    parts: list[list[int | bytes]] = []
    pos = 8
    while pos < len(wasm):
        size, start = _read_uleb(wasm, pos + 1)
        parts.append([wasm[pos], wasm[start:start + size]])
        pos = start + size
    for part in parts:
        if part[0] == section:
            body = part[1]
            assert isinstance(body, bytes)
            had, rest = _read_uleb(body, 0)
            part[1] = uleb128(had + count) + body[rest:] + entries
            break
    else:
        later = [i for i, (sid, _) in enumerate(parts) if sid and
                 _SECTION_ORDER.index(int(sid)) > _SECTION_ORDER.index(section)]
        parts.insert(later[0] if later else len(parts), [section, uleb128(count) + entries])
    out = bytearray(wasm[:8])
    for sid, body in parts:
        assert isinstance(sid, int) and isinstance(body, bytes)
        out += bytes([sid]) + uleb128(len(body)) + body
    return bytes(out)


def _guest() -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat()))


def many_globals(n: int = 999_000) -> bytes:
    return _with_entries(_guest(), _GLOBAL, b"\x7f\x01\x41\x00\x0b" * n, n)  # mut i32 = 0


def many_imported_globals(n: int = 20_000) -> bytes:
    entry = b"\x03env\x01g\x03\x7f\x00"  # env.g: an immutable i32
    return _with_entries(_guest(), _IMPORT, entry * n, n)


def many_imports(n: int = 100_000) -> bytes:
    # wasmext.log, the ABI's own, imported again and again under its own type.
    types = inspect(_guest()).types  # the index of the type added next
    wasm = _with_entries(_guest(), _TYPE, b"\x60\x03\x7f\x7f\x7f\x00", 1)
    return _with_entries(wasm, _IMPORT, (b"\x07wasmext\x03log\x00" + uleb128(types)) * n, n)


def many_exports(n: int = 100_000) -> bytes:
    names = (f"e{i:0200d}".encode() for i in range(n))
    return _with_entries(_guest(), _EXPORT,
                         b"".join(uleb128(len(name)) + name + b"\x00\x00" for name in names), n)


def long_export_names(n: int = 5_000, length: int = 3_000) -> bytes:
    names = (f"e{i:0{length}d}".encode() for i in range(n))
    return _with_entries(_guest(), _EXPORT,
                         b"".join(uleb128(len(name)) + name + b"\x00\x00" for name in names), n)


ATTACKS: dict[str, tuple[Callable[[], bytes], str]] = {
    "globals": (many_globals, "over the host's max_globals 10000"),
    "imported globals": (many_imported_globals, "over the host's max_globals 10000"),
    "imports": (many_imports, "over the host's max_imports 1000"),
    "exports": (many_exports, "over the host's max_exports 10000"),
    "long export names": (long_export_names, "over the host's max_name_bytes 1048576"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_module_whose_shape_costs_the_host_is_refused_at_load(
        runtime: Runtime, healthy: Plugin, attack: str) -> None:
    make, says = ATTACKS[attack]
    wasm = make()
    before = rss_mib()
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge) as caught:
        runtime.load(wasm, plugin_id="shape")
    assert time.monotonic() - started < BOUND_S
    assert rss_mib() - before < GROWTH_MIB
    assert says in str(caught.value) and "shape" in str(caught.value)
    assert "shape" not in runtime.plugins
    assert healthy.call("test", "ping").value == "alive"


@pytest.mark.parametrize(("section", "entry", "what"), [
    (_IMPORT, b"\x00\x00\x00\x00", "imports"),  # "" "" (func 0): four bytes each
    (_EXPORT, b"\x00\x00\x00", "exports"),
], ids=["imports", "exports"])
def test_more_entries_than_wasmtime_accepts_are_refused_before_the_walk(
        runtime: Runtime, healthy: Plugin, section: int, entry: bytes, what: str) -> None:
    # 7.9 million of them fill 30 MiB or less (under max_module_bytes): walking each took
    # 7.5 s (imports) and 4.5 s (exports) before the caps refused the count.
    count = 7_900_000
    body = uleb128(count) + entry * count
    wasm = b"\0asm\x01\0\0\0" + bytes([section]) + uleb128(len(body)) + body
    started = time.monotonic()
    with pytest.raises(InvalidModule, match=f"{count} {what}, over the 1000000 "
                       "WebAssembly engines accept"):
        runtime.load(wasm, plugin_id="counted")
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", "ping").value == "alive"


def test_the_caps_are_what_the_refusal_says(runtime: Runtime) -> None:
    # An embedder that raises a cap loads the module (its instances then cost what
    # they declare): the refusal was the cap, not a module wasmtime would refuse.
    loose = ModuleCaps(max_globals=2_000_000)
    with Runtime(cache=False, module_caps=loose) as roomy:
        plugin = roomy.load(many_globals(20_000), plugin_id="roomy")
        assert plugin.call("test").value == "ok"
    with pytest.raises(ModuleTooLarge, match="max_globals 10000"):
        runtime.load(many_globals(10_000), plugin_id="just-over")  # and the guest's own one
    assert runtime.load(many_globals(9_999), plugin_id="at-cap").call("test").value == "ok"


def test_the_section_walk_counts_globals_imports_exports_and_names() -> None:
    wasm = bytes(wasmtime.wat2wasm(guest_wat(
        imports='(import "wasmext" "log" (func (param i32 i32 i32))) '
                '(import "env" "g" (global i32))',
        extra='(global i64 (i64.const 0)) (func (export "more"))')))
    shape = inspect(wasm)
    assert shape.globals == 3  # the guest's heap pointer, the imported one, the i64
    assert shape.imports == 2
    assert shape.exports == 6  # memory, the four ABI functions, "more"
    assert shape.name_bytes == len("wasmextlogenvg") + len(
        "memorywasmext_abi_versionwasmext_allocwasmext_registerwasmext_callmore")
    assert inspect(many_globals(100)).globals == 101
    assert inspect(many_imported_globals(7)).globals == 8
    elements = inspect(many_element_segments(10))
    assert elements.code_bytes < 100 and elements.element_bytes == 1 + 6 * 10



def with_functions(body: bytes, count: int) -> bytes:
    """The guest with `count` more functions () -> () of `body` (locals and code)."""
    wasm = _guest()
    new_type = inspect(wasm).types
    wasm = _with_entries(wasm, _TYPE, b"\x60\x00\x00", 1)
    wasm = _with_entries(wasm, _FUNCTION, uleb128(new_type) * count, count)
    return _with_entries(wasm, _CODE, (uleb128(len(body)) + body) * count, count)


def nested_loops(count: int = 200, depth: int = 1_000) -> bytes:
    return with_functions(b"\x00" + b"\x03\x40" * depth + b"\x0b" * depth + b"\x0b", count)


def many_calls(calls: int = 87_000) -> bytes:
    # Each calls function 0 (wasmext_abi_version) and drops its answer.
    return with_functions(b"\x00" + b"\x10\x00\x1a" * calls + b"\x0b", 1)


def many_element_segments(n: int = 99_000) -> bytes:
    # Passive segments of one (ref.func 0) expression each; wasmparser's cap is 100,000.
    return _with_entries(_guest(), _ELEMENT, b"\x05\x70\x01\xd2\x00\x0b" * n, n)


COMPILE_BOMBS: dict[str, tuple[Callable[[], bytes], ModuleCaps, str]] = {
    "nested loops": (nested_loops, ModuleCaps(compile_timeout_ms=1_000),
                     "compiling it took over the host's compile_timeout_ms 1000"),
    "calls in one body": (many_calls, ModuleCaps(compile_memory_bytes=64 * 2**20),
                          "compiling it needed over the host's compile_memory_bytes 67108864"),
    "element segments": (many_element_segments, ModuleCaps(compile_timeout_ms=1_000),
                         "compiling it took over the host's compile_timeout_ms 1000"),
}


@pytest.mark.parametrize("bomb", sorted(COMPILE_BOMBS))
def test_a_compile_over_its_time_or_memory_is_refused_and_costs_the_host_nothing(
        tmp_path: Path, bomb: str) -> None:
    make, caps, says = COMPILE_BOMBS[bomb]
    wasm = make()
    assert not caps.compiles_inline(inspect(wasm))
    cache = CompileCache(tmp_path / "modules", tmp_path / "key")
    with Runtime(cache=cache, module_caps=caps) as runtime:
        healthy = runtime.load(bytes(wasmtime.wat2wasm(guest_wat(response={
            "ok": True, "value": "alive"}))), plugin_id="healthy")
        before = rss_mib()
        started = time.monotonic()
        with pytest.raises(ModuleTooLarge) as caught:
            runtime.load(wasm, plugin_id="bomb")
        assert time.monotonic() - started < caps.compile_timeout_ms / 1000 + BOUND_S
        assert rss_mib() - before < GROWTH_MIB
        assert says in str(caught.value) and "bomb" in str(caught.value)
        assert "bomb" not in runtime.plugins
        assert healthy.call("test", "ping").value == "alive"


def test_naming_the_extism_kernel_does_not_skip_the_bounded_compile(runtime: Runtime,
                                                                   healthy: Plugin) -> None:
    # A module whose bytes hold the Extism kernel's name is compiled to read its imports
    # (is it an Extism plugin?): that compile was in the process, unbounded.
    kernel = b"extism:host/env"
    name = b"x"
    custom = b"\x00" + uleb128(1 + len(name) + len(kernel)) + uleb128(len(name)) + name + kernel
    caps = ModuleCaps(compile_timeout_ms=1_000)
    with Runtime(cache=False, module_caps=caps) as strict:
        before = rss_mib()
        started = time.monotonic()
        with pytest.raises(ModuleTooLarge, match="compile_timeout_ms 1000"):
            strict.load(nested_loops() + custom, plugin_id="kernel")
        assert time.monotonic() - started < 1 + BOUND_S
        assert rss_mib() - before < GROWTH_MIB
    assert healthy.call("test", "ping").value == "alive"


def test_a_component_compiles_in_a_child_under_its_own_limits(runtime: Runtime,
                                                              healthy: Plugin) -> None:
    # A component wrapping the nested loops: compiled in the process, it ran for minutes.
    component = _component_of(nested_loops())
    caps = ModuleCaps(compile_component_timeout_ms=1_000)
    with Runtime(cache=False, module_caps=caps) as strict:
        before = rss_mib()
        started = time.monotonic()
        with pytest.raises(ModuleTooLarge, match="compile_component_timeout_ms 1000"):
            strict.load(component, plugin_id="component")
        assert time.monotonic() - started < 1 + BOUND_S
        assert rss_mib() - before < GROWTH_MIB
    assert healthy.call("test", "ping").value == "alive"


def _component_of(*cores: bytes) -> bytes:
    return b"\0asm\x0d\x00\x01\x00" + b"".join(
        b"\x01" + uleb128(len(core)) + core for core in cores)


@pytest.mark.parametrize("cores", [(999_000,), (6_000, 6_000)], ids=["one", "together"])
def test_a_components_core_modules_globals_are_capped_together(
        runtime: Runtime, healthy: Plugin, cores: tuple[int, ...]) -> None:
    # Each instance of a component holds every global of its core modules.
    component = _component_of(*(many_globals(n) for n in cores))
    before = rss_mib()
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge, match="globals in its core modules, over the host's "
                       "max_globals 10000"):
        runtime.load(component, plugin_id="globals")
    assert time.monotonic() - started < BOUND_S
    assert rss_mib() - before < GROWTH_MIB
    assert healthy.call("test", "ping").value == "alive"


def test_a_module_compiled_in_a_child_runs_and_is_cached(tmp_path: Path) -> None:
    # Over inline_compile_bytes, yet a plain module: the child's code is the engine's own.
    wasm = with_functions(b"\x00" + b"\x01" * 1_000 + b"\x0b", 20)  # 20 bodies of nops
    assert not ModuleCaps().compiles_inline(inspect(wasm))
    for expect_hits in (0, 1):
        cache = CompileCache(tmp_path / "modules", tmp_path / "key")
        with Runtime(cache=cache) as runtime:
            assert runtime.load(wasm, plugin_id="big").call("test").value == "ok"
        assert cache.hits == expect_hits


def test_a_module_the_child_cannot_compile_is_invalid(runtime: Runtime, healthy: Plugin
                                                      ) -> None:
    wasm = with_functions(b"\x00" + b"\x01" * 20_000 + b"\x6a\x0b", 1)  # i32.add of nothing
    with pytest.raises(InvalidModule, match="does not compile") as caught:
        runtime.load(wasm, plugin_id="broken")
    assert not isinstance(caught.value, ModuleTooLarge)
    assert healthy.call("test", "ping").value == "alive"


@pytest.mark.parametrize("pool", [0, 2])
def test_more_tables_than_an_instance_may_have_are_refused_before_compiling(pool: int) -> None:
    # Without the pool, five tables compiled and then failed every instantiation as a
    # GuestTrap ("table count too high"): the same refusal as with it, before compiling.
    with Runtime(cache=False, engine=EngineConfig(instance_pool=pool)) as runtime:
        healthy = runtime.load(bytes(wasmtime.wat2wasm(guest_wat())), plugin_id="healthy")
        started = time.monotonic()
        with pytest.raises(MemoryLimitExceeded, match="declares 5 tables; an instance may "
                           "have 4"):
            runtime.load(bytes(wasmtime.wat2wasm(guest_wat(extra="(table 1 funcref)" * 5))),
                         plugin_id="tables")
        assert time.monotonic() - started < BOUND_S
        assert healthy.call("test").value == "ok"
