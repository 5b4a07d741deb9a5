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

__all__ = ["ModuleCaps", "ModuleShape", "check_memories", "inspect", "is_component"]

_COMPONENT_LAYER = b"\x0d\x00\x01\x00"  # version 0x0d, layer 1: a component


def is_component(wasm: bytes) -> bool:
    """Is `wasm` a component (not a core module)? Read from the 8-byte header."""
    return wasm[:4] == b"\0asm" and wasm[4:8] == _COMPONENT_LAYER

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
        more globals together than `max_globals` (each instance of the component holds
        all of them). The other caps bound one plugin module's compile: a component's
        interpreter is far over them, and compiles in a child (`sandbox.compiler`)."""
        total = 0
        for core in _core_modules(wasm):
            try:
                total += inspect(core).globals
            except InvalidModule:
                continue  # wasmtime's validator names what is wrong with it
        if total > self.max_globals:
            raise ModuleTooLarge(f"{name}: {total} globals in its core modules, over the "
                                 f"host's max_globals {self.max_globals}")

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
