"""A module's shape, read from its bytes before wasmtime compiles anything.

Compile time grows with the number of functions and the size of each body,
so a module of 60,000 empty functions or one body of a million instructions
costs seconds of host CPU before any budget of a call applies. `inspect`
walks the section headers (LEB128 lengths), counts what compiling would cost
and what instantiating would allocate (declared table minimums), and
`ModuleCaps.check` refuses a module over the host's policy with
`ModuleTooLarge`.

What a module declares also costs the host outside any call and outside
`memory_bytes`: each global is 16 bytes of every instance's metadata (999,000
globals made each instance about 16 MiB, times the instances alive), and each
import and export a name and a type the host reads into Python at load (100,000
long export names: a second of load and 200 MiB). Those are counted too. Bytes
that are not a well-formed section stream are `InvalidModule`.

It also records each memory's index type: the ABI's pointers and lengths are
i32 into the one memory the host reads and writes (abi/SPEC.md 1), so
`check_memories` refuses a 64-bit memory, or a second one, with `AbiMismatch`
before compiling. The engine leaves both features out as well
(`engine.SharedEngine`); this names the plugin and the reason in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from wasmext.errors import AbiMismatch, InvalidModule, ModuleTooLarge

__all__ = ["MAX_CORE_INSTANCES", "ModuleCaps", "ModuleShape", "check_memories", "inspect"]

# Core instances one instance of a component may make (its store's limit): a
# componentized CPython or SpiderMonkey makes about a dozen. Generous, but finite.
MAX_CORE_INSTANCES = 64

_TYPE, _IMPORT, _FUNCTION, _TABLE, _MEMORY, _GLOBAL, _EXPORT, _START, _ELEMENT, _CODE = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


@dataclass(frozen=True)
class ModuleCaps:
    """Host policy on what a module may cost to compile (engine-wide, not per plugin).

    The defaults admit every SDK example with a wide margin (the Go one is the
    largest) and keep a compile short on one core.
    """

    max_module_bytes: int = 32 * 2**20
    max_functions: int = 20_000
    max_function_body_bytes: int = 256 * 2**10
    max_code_bytes: int = 16 * 2**20
    # Globals, defined and imported: every instance holds each one (16 bytes apiece in
    # wasmtime 50) beside its memory, where `memory_bytes` does not count it.
    max_globals: int = 10_000
    # A component's imports, each core instance's own: every import is a 32-byte slot in
    # that instance's metadata, outside `memory_bytes` (one module of 99,000 imports
    # instantiated 60 times: 180 MiB an instance, and 179 MiB to load it). Counted as
    # the largest core module's imports times the core instances the component makes
    # (a bound, not a census): the Python SDK's, 14 instances of at most 918 imports,
    # is 12,852; the JavaScript one's 9.
    max_component_import_slots: int = 100_000
    # The ABI offers a few dozen imports and needs six exports; a toolchain exporting
    # everything stays far below these.
    max_imports: int = 1_000
    max_exports: int = 10_000
    # The bytes of every import and export name together (module and field names).
    max_name_bytes: int = 2**20
    # A module with more bytes of code and element segments than this compiles in a
    # child process (`sandbox.compiler`) killed at `compile_timeout_ms` and refused
    # memory past `compile_memory_bytes`: compile time grows faster than those bytes
    # (nested loops, many calls in one body, element segments: 99,000 of them took 4 s).
    # Below it a compile takes milliseconds, and starting a child would cost more.
    inline_compile_bytes: int = 16 * 2**10
    compile_timeout_ms: int = 10_000
    compile_memory_bytes: int = 2**30
    # A component always compiles in a child: a componentized Python interpreter
    # (18 MB) took 43 s and 460 MiB on the project's machine.
    compile_component_timeout_ms: int = 300_000
    compile_component_memory_bytes: int = 4 * 2**30

    def check_component(self, wasm: bytes, name: str = "<component>") -> None:
        """Raise ModuleTooLarge when the core modules of the component `wasm` declare
        more globals together than `max_globals`, or its core instances may hold more
        import slots than `max_component_import_slots` (each instance of the component
        holds all of them). The other caps bound one plugin module's compile: a
        component's interpreter is far over them, and compiles in a child
        (`sandbox.compiler`)."""
        globals_total = largest_imports = 0
        for core in _core_modules(wasm):
            try:
                shape = inspect(core)
            except InvalidModule:
                continue  # wasmtime's validator names what is wrong with it
            globals_total += shape.globals
            largest_imports = max(largest_imports, shape.imports)
        if globals_total > self.max_globals:
            raise ModuleTooLarge(f"{name}: {globals_total} globals in its core modules, over "
                                 f"the host's max_globals {self.max_globals}")
        instances = _core_instantiations(wasm)
        slots = instances * largest_imports
        if slots > self.max_component_import_slots:
            raise ModuleTooLarge(
                f"{name}: up to {slots} import slots in its core instances ({largest_imports} "
                f"imports in its largest core module, up to {instances} instances), over "
                f"the host's max_component_import_slots {self.max_component_import_slots}")

    def compiles_inline(self, shape: ModuleShape) -> bool:
        """Whether `shape` is small enough to compile in this process."""
        return shape.code_bytes + shape.element_bytes <= self.inline_compile_bytes

    def check(self, shape: ModuleShape, name: str = "<module>") -> None:
        """Raise ModuleTooLarge when `shape` is over any cap."""
        over = [
            ("bytes", shape.size, self.max_module_bytes, "max_module_bytes"),
            ("functions", shape.functions, self.max_functions, "max_functions"),
            ("bytes in its largest function body", shape.largest_body,
             self.max_function_body_bytes, "max_function_body_bytes"),
            ("bytes of code", shape.code_bytes, self.max_code_bytes, "max_code_bytes"),
            ("globals", shape.globals, self.max_globals, "max_globals"),
            ("imports", shape.imports, self.max_imports, "max_imports"),
            ("exports", shape.exports, self.max_exports, "max_exports"),
            ("bytes of import and export names", shape.name_bytes, self.max_name_bytes,
             "max_name_bytes"),
        ]
        for what, value, cap, knob in over:
            if value > cap:
                raise ModuleTooLarge(f"{name}: {value} {what}, over the host's {knob} {cap}")


@dataclass(frozen=True)
class ModuleShape:
    """What compiling and instantiating a module would cost, read from its sections."""

    size: int
    types: int
    imported_functions: int
    functions: int  # defined in the module (the function section's count)
    code_bytes: int
    largest_body: int
    table_minimums: tuple[int, ...]  # declared and imported tables, in order
    has_start: bool = False  # a start function runs when an instance is made
    # Imported and defined memories, in order: True for a 64-bit (memory64) one.
    memories: tuple[bool, ...] = ()
    globals: int = 0  # defined and imported
    imports: int = 0
    exports: int = 0
    name_bytes: int = 0  # of every import's module and field name and every export's
    element_bytes: int = 0  # the element section's: each segment is compiled


def check_memories(shape: ModuleShape, name: str = "<module>") -> None:
    """Raise AbiMismatch unless the module has at most one memory, and that one 32-bit."""
    if any(shape.memories):
        raise AbiMismatch(f"{name}: has a 64-bit memory (memory64); ABI v1 plugins are "
                          "wasm32, with i32 pointers and lengths")
    if len(shape.memories) > 1:
        raise AbiMismatch(f"{name}: has {len(shape.memories)} memories; ABI v1 plugins have "
                          "one, the exported 'memory'")


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise InvalidModule("truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self, bits: int = 32) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if shift >= bits + 7:
                raise InvalidModule("LEB128 integer too long")
        if result >= 1 << bits:
            raise InvalidModule("LEB128 integer out of range")
        return result

    def skip(self, n: int) -> None:
        if n > self.end - self.pos:
            raise InvalidModule("truncated")
        self.pos += n

    def name(self) -> int:
        """Skip a name; returns its length in bytes."""
        length = self.uleb()
        self.skip(length)
        return length

    def limits(self) -> int:
        """Table or memory limits; returns the minimum."""
        return self.limits_of()[0]

    def limits_of(self) -> tuple[int, bool]:
        """Table or memory limits: (minimum, whether they are 64-bit)."""
        flags = self.byte()
        if flags & ~0x07:  # 0x08 (a custom page size) is not offered either
            raise InvalidModule(f"bad limits flags {flags:#x}")
        is64 = bool(flags & 0x04)
        bits = 64 if is64 else 32
        minimum = self.uleb(bits)
        if flags & 0x01:
            self.uleb(bits)
        return minimum, is64

    def memory_is64(self) -> bool:
        """Read a memory type; True when it is 64-bit."""
        return self.limits_of()[1]

    def table_type(self) -> int:
        if self.byte() in (0x63, 0x64):  # (ref null? heaptype)
            self.uleb(33)  # an s33; only its length matters here
        return self.limits()


@dataclass
class _Imports:
    count: int = 0
    functions: int = 0
    globals: int = 0
    name_bytes: int = 0


def _imports(r: _Reader, tables: list[int], memories: list[bool]) -> _Imports:
    """Walk the import section."""
    seen = _Imports(count=r.uleb())
    for _ in range(seen.count):
        seen.name_bytes += r.name() + r.name()
        kind = r.byte()
        if kind == 0x00:
            r.uleb()
            seen.functions += 1
        elif kind == 0x01:
            tables.append(r.table_type())
        elif kind == 0x02:
            memories.append(r.memory_is64())
        elif kind == 0x03:
            r.byte()
            r.byte()
            seen.globals += 1
        elif kind == 0x04:
            r.byte()
            r.uleb()
        else:
            raise InvalidModule(f"unknown import kind {kind:#x}")
    return seen


def _exports(r: _Reader) -> tuple[int, int]:
    """Walk the export section: (exports, bytes of their names)."""
    count = r.uleb()
    name_bytes = 0
    for _ in range(count):
        name_bytes += r.name()
        r.byte()
        r.uleb()
    return count, name_bytes


def _code(r: _Reader) -> tuple[int, int, int]:
    """Walk the code section: (bodies, total body bytes, largest body)."""
    count = r.uleb()
    total = largest = 0
    for _ in range(count):
        size = r.uleb()
        r.skip(size)
        total += size
        largest = max(largest, size)
    return count, total, largest


_CORE_MODULE, _NESTED_COMPONENT = 1, 4  # a component's sections holding code
_MAX_COMPONENT_NESTING = 16


def _core_modules(wasm: bytes, depth: int = 0) -> list[bytes]:
    """The core modules of a component (of its nested components too), by their section
    headers; a malformed stream ends the walk (wasmtime's validator refuses it)."""
    found: list[bytes] = []
    if depth > _MAX_COMPONENT_NESTING:
        return found
    top = _Reader(wasm, 8, len(wasm))
    try:
        while top.pos < top.end:
            section = top.byte()
            size = top.uleb()
            start = top.pos
            top.skip(size)
            if section == _CORE_MODULE:
                found.append(wasm[start:start + size])
            elif section == _NESTED_COMPONENT:
                found += _core_modules(wasm[start:start + size], depth + 1)
    except InvalidModule:
        pass
    return found


_CORE_INSTANCE = 2


def _core_instantiations(wasm: bytes) -> int:
    """How many core instances an instance of the component `wasm` may make: its
    `instantiate` entries, at most MAX_CORE_INSTANCES (its store refuses more). A
    nested component that instantiates core modules may itself be instantiated any
    number of times: then the store's limit is the bound."""
    top_level, nested = _instantiate_entries(wasm)
    return MAX_CORE_INSTANCES if nested else min(top_level, MAX_CORE_INSTANCES)


def _instantiate_entries(wasm: bytes, depth: int = 0) -> tuple[int, int]:
    """(`instantiate` entries in the core instance sections of `wasm`, those in its
    nested components); a malformed stream ends the walk, as in `_core_modules`."""
    here = nested = 0
    if depth > _MAX_COMPONENT_NESTING:
        return here, nested
    top = _Reader(wasm, 8, len(wasm))
    try:
        while top.pos < top.end:
            section = top.byte()
            size = top.uleb()
            start = top.pos
            top.skip(size)
            if section == _CORE_INSTANCE:
                here += _instantiates_in(_Reader(wasm, start, start + size))
            elif section == _NESTED_COMPONENT:
                inner, deeper = _instantiate_entries(wasm[start:start + size], depth + 1)
                nested += inner + deeper
    except InvalidModule:
        pass
    return here, nested


def _instantiates_in(r: _Reader) -> int:
    """The `instantiate` entries of one core instance section (the others gather
    exports of instances already made, and make none)."""
    count = 0
    for _ in range(r.uleb()):
        kind = r.byte()
        if kind == 0x00:  # instantiate a module: its index, then named instance arguments
            count += 1
            r.uleb()
            for _ in range(r.uleb()):
                r.name()
                r.byte()
                r.uleb()
        else:  # a bag of exports: name, sort (one byte for a core sort), index
            for _ in range(r.uleb()):
                r.name()
                r.byte()
                r.uleb()
    return count


def inspect(wasm: bytes) -> ModuleShape:
    """The module's shape; InvalidModule when the section stream is malformed."""
    if len(wasm) < 8 or wasm[:4] != b"\0asm":
        raise InvalidModule("not a WebAssembly binary (bad magic)")
    if wasm[4:8] != b"\x01\0\0\0":
        raise InvalidModule("not a WebAssembly core module of version 1")
    top = _Reader(wasm, 8, len(wasm))
    types = functions = bodies = code_bytes = largest = 0
    defined_globals = exports = export_name_bytes = element_bytes = 0
    imported = _Imports()
    tables: list[int] = []
    memories: list[bool] = []
    has_start = False
    while top.pos < top.end:
        section = top.byte()
        size = top.uleb()
        start = top.pos
        top.skip(size)
        r = _Reader(wasm, start, start + size)
        if section == _TYPE:
            types = r.uleb()
        elif section == _IMPORT:
            imported = _imports(r, tables, memories)
        elif section == _FUNCTION:
            functions = r.uleb()
        elif section == _TABLE:
            for _ in range(r.uleb()):
                if r.data[r.pos:r.pos + 2] == b"\x40\x00":
                    # A table with an initializer expression: take its limits, and
                    # leave the rest of the section to wasmtime's validator.
                    r.skip(2)
                    tables.append(r.table_type())
                    break
                tables.append(r.table_type())
        elif section == _MEMORY:
            memories.extend(r.memory_is64() for _ in range(r.uleb()))
        elif section == _GLOBAL:
            defined_globals = r.uleb()
        elif section == _EXPORT:
            exports, export_name_bytes = _exports(r)
        elif section == _CODE:
            bodies, code_bytes, largest = _code(r)
        elif section == _START:
            has_start = True
        elif section == _ELEMENT:
            element_bytes = size
        elif section > 13 and section != 0:
            raise InvalidModule(f"unknown section id {section}")
    if bodies != functions:
        raise InvalidModule(f"function and code sections disagree ({functions} vs {bodies})")
    return ModuleShape(len(wasm), types, imported.functions, functions, code_bytes, largest,
                       tuple(tables), has_start, tuple(memories),
                       globals=imported.globals + defined_globals, imports=imported.count,
                       exports=exports, name_bytes=imported.name_bytes + export_name_bytes,
                       element_bytes=element_bytes)
