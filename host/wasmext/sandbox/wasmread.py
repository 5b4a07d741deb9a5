"""Reading a WebAssembly binary before wasmtime compiles anything: the LEB128 reader,
the section stream, and a core module's shape (`inspect`).

`inspect` walks a core module's section headers and counts what compiling would cost
and what instantiating would allocate; `sandbox.wasmcheck` holds the host's caps on
those counts, and `sandbox.componentwalk` reads a component's core modules with the
same reader. Bytes that are not a well-formed section stream are `InvalidModule`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from wasmext.errors import InvalidModule

__all__ = ["ModuleShape", "Reader", "declared_imports_and_exports", "inspect",
           "is_component", "sections"]


_COMPONENT_LAYER = b"\x0d\x00\x01\x00"  # version 0x0d, layer 1: a component


def is_component(wasm: bytes) -> bool:
    """Is `wasm` a component (not a core module)? Read from the 8-byte header."""
    return wasm[:4] == b"\0asm" and wasm[4:8] == _COMPONENT_LAYER


_TYPE, _IMPORT, _FUNCTION, _TABLE, _MEMORY, _GLOBAL, _EXPORT, _START, _ELEMENT, _CODE = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


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
    defined_memories: int = 0  # in its memory section (an imported one is another's)
    defined_tables: int = 0  # in its table section (an imported one is another's)


class Reader:
    """A cursor over `data[pos:end]`; InvalidModule where the bytes run out or a number
    is malformed."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def byte(self) -> int:
        """The next byte."""
        if self.pos >= self.end:
            raise InvalidModule("truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self, bits: int = 32) -> int:
        """The next unsigned LEB128 number of at most `bits` bits."""
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
        """Step over `n` bytes."""
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
        """Read a table type; returns its minimum."""
        if self.byte() in (0x63, 0x64):  # (ref null? heaptype)
            self.uleb(33)  # an s33; only its length matters here
        return self.limits()


def sections(wasm: bytes) -> Iterator[tuple[int, int, int]]:
    """Each top-level section of a module or component: (its id, where its contents
    start, their size); InvalidModule, from the reader, where the stream is malformed."""
    top = Reader(wasm, 8, len(wasm))
    while top.pos < top.end:
        section = top.byte()
        size = top.uleb()
        start = top.pos
        top.skip(size)
        yield section, start, size


@dataclass
class _Imports:
    count: int = 0
    functions: int = 0
    globals: int = 0
    name_bytes: int = 0


# The most entries wasmtime's validator accepts (wasmparser's limits), checked before a
# walk: a 30 MiB import section of 7.9 million four-byte imports took this walk 7.5 s.
_VALIDATOR_MAX_IMPORTS = _VALIDATOR_MAX_EXPORTS = 1_000_000
_VALIDATOR_MAX_FUNCTIONS = 1_000_000


def _counted(r: Reader, most: int, what: str) -> int:
    """A section's entry count; InvalidModule over what wasmtime's validator accepts."""
    count = r.uleb()
    if count > most:
        raise InvalidModule(f"{count} {what}, over the {most} WebAssembly engines accept")
    return count


def _imports(r: Reader, tables: list[int], memories: list[bool]) -> _Imports:
    """Walk the import section."""
    seen = _Imports(count=_counted(r, _VALIDATOR_MAX_IMPORTS, "imports"))
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


def _exports(r: Reader) -> tuple[int, int]:
    """Walk the export section: (exports, bytes of their names)."""
    count = _counted(r, _VALIDATOR_MAX_EXPORTS, "exports")
    name_bytes = 0
    for _ in range(count):
        name_bytes += r.name()
        r.byte()
        r.uleb()
    return count, name_bytes


def _code(r: Reader) -> tuple[int, int, int]:
    """Walk the code section: (bodies, total body bytes, largest body)."""
    count = _counted(r, _VALIDATOR_MAX_FUNCTIONS, "function bodies")
    total = largest = 0
    for _ in range(count):
        size = r.uleb()
        r.skip(size)
        total += size
        largest = max(largest, size)
    return count, total, largest


def declared_imports_and_exports(wasm: bytes) -> int:
    """The counts a core module's import and export sections begin with, read from its
    section headers without walking the entries (0 for what is malformed)."""
    declared = 0
    try:
        for section, start, size in sections(wasm):
            if section in (_IMPORT, _EXPORT):
                declared += Reader(wasm, start, start + size).uleb()
    except InvalidModule:
        pass  # inspect says so, or wasmtime's validator
    return declared


def inspect(wasm: bytes) -> ModuleShape:
    """The module's shape; InvalidModule when the section stream is malformed."""
    if len(wasm) < 8 or wasm[:4] != b"\0asm":
        raise InvalidModule("not a WebAssembly binary (bad magic)")
    if wasm[4:8] != b"\x01\0\0\0":
        raise InvalidModule("not a WebAssembly core module of version 1")
    types = functions = bodies = code_bytes = largest = 0
    defined_globals = exports = export_name_bytes = element_bytes = 0
    imported = _Imports()
    tables: list[int] = []
    memories: list[bool] = []
    defined_memories = defined_tables = 0
    has_start = False
    for section, start, size in sections(wasm):
        r = Reader(wasm, start, start + size)
        if section == _TYPE:
            types = r.uleb()
        elif section == _IMPORT:
            imported = _imports(r, tables, memories)
        elif section == _FUNCTION:
            functions = r.uleb()
        elif section == _TABLE:
            # The count, even where the walk stops at an initializer expression.
            defined_tables = r.uleb()
            for _ in range(defined_tables):
                if r.data[r.pos:r.pos + 2] == b"\x40\x00":
                    # A table with an initializer expression: take its limits, and
                    # leave the rest of the section to wasmtime's validator.
                    r.skip(2)
                    tables.append(r.table_type())
                    break
                tables.append(r.table_type())
        elif section == _MEMORY:
            defined_memories = r.uleb()
            memories.extend(r.memory_is64() for _ in range(defined_memories))
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
                       element_bytes=element_bytes, defined_memories=defined_memories,
                       defined_tables=defined_tables)
