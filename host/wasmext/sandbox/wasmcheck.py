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

A component's core instances hold what their modules declare, once per instance made:
`ModuleCaps.check_component` follows the component's index spaces to the core instances
one instance of it makes (nested components' instantiations multiplied out: doubling
22 levels deep planned 4 million from 1.2 KB) and caps their globals and import slots
(one module of 99,000 imports made 60 times: 180 MiB an instance), and their linear
memories at one (the store limiter caps each memory at `memory_bytes`, not their sum:
three memories grown to it held three times `memory_bytes`).

It also records each memory's index type: the ABI's pointers and lengths are
i32 into the one memory the host reads and writes (abi/SPEC.md 1), so
`check_memories` refuses a 64-bit memory, or a second one, with `AbiMismatch`
before compiling. The engine leaves both features out as well
(`engine.SharedEngine`); this names the plugin and the reason in one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from wasmext.errors import AbiMismatch, InvalidModule, ModuleTooLarge

__all__ = ["MAX_COMPONENT_MEMORIES", "MAX_COMPONENT_NESTING", "MAX_CORE_INSTANCES",
           "ModuleCaps", "ModuleShape",
           "check_memories", "inspect", "is_component"]

_COMPONENT_LAYER = b"\x0d\x00\x01\x00"  # version 0x0d, layer 1: a component


def is_component(wasm: bytes) -> bool:
    """Is `wasm` a component (not a core module)? Read from the 8-byte header."""
    return wasm[:4] == b"\0asm" and wasm[4:8] == _COMPONENT_LAYER


# Core instances one instance of a component may make (its store's limit): a
# componentized CPython or SpiderMonkey makes about a dozen. Generous, but finite.
MAX_CORE_INSTANCES = 64
# Linear memories one instance of a component may make (its store's limit): the store
# limiter caps each at `memory_bytes`, not their sum (three memories grown to the cap
# held three times it). Those components define one; their other modules import it.
MAX_COMPONENT_MEMORIES = 1

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
    # A component's imports, each core instance's own: every import is a slot of up to
    # 32 bytes in that instance's metadata, outside `memory_bytes` (one module of 99,000
    # imports instantiated 60 times: 180 MiB an instance, and 179 MiB to load). Summed
    # over the core instances one instance of the component makes: the Python SDK's
    # make 14 with 2,255 imports, the JavaScript SDK's 3 with 5.
    max_component_import_slots: int = 50_000
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
        """Raise ModuleTooLarge when the component `wasm` would cost an instance, or the
        host at load, more than the caps allow: its core modules' globals together over
        `max_globals`, the globals of the core instances one instance makes (a module
        instantiated twice holds its globals twice) over `max_globals` too, their import
        slots over `max_component_import_slots`, more linear memories than
        MAX_COMPONENT_MEMORIES (the limiter caps each, not their sum), or more core
        instances than
        MAX_CORE_INSTANCES, in it or in any component it defines (nested components
        instantiated twice, and twice inside, add up to millions from a kilobyte; the
        store would refuse every instance). The
        other caps bound one plugin module's compile: a component's interpreter is far
        over them, and compiles in a child (`sandbox.compiler`)."""
        largest_imports = largest_globals = largest_memories = globals_total = 0
        try:
            cores = _core_modules(wasm)
        except ModuleTooLarge as exc:
            raise ModuleTooLarge(f"{name}: {exc}") from None
        declared = sum(_declared_imports_and_exports(core) for core in cores)
        if declared > _COMPONENT_MAX_IMPORTS_AND_EXPORTS:
            raise ModuleTooLarge(f"{name}: {declared} imports and exports in its core modules, "
                                 f"over the {_COMPONENT_MAX_IMPORTS_AND_EXPORTS} the host reads")
        for core in cores:
            try:
                shape = inspect(core)
            except InvalidModule:
                continue  # wasmtime's validator names what is wrong with it
            largest_imports = max(largest_imports, shape.imports)
            largest_globals = max(largest_globals, shape.globals)
            largest_memories = max(largest_memories, shape.defined_memories)
            globals_total += shape.globals
        # Loading costs the host each module's globals even where none is instantiated
        # (999,000 in a module no instance makes: 71 MiB to load).
        if globals_total > self.max_globals:
            raise ModuleTooLarge(f"{name}: {globals_total} globals in its core modules, over "
                                 f"the host's max_globals {self.max_globals}")
        plan, most_instances = _plan(wasm, (largest_imports, largest_globals,
                                            largest_memories))
        if most_instances > MAX_CORE_INSTANCES:
            raise ModuleTooLarge(
                f"{name}: plans {most_instances} core instances (nested components' "
                f"instantiations multiplied out), over the {MAX_CORE_INSTANCES} an instance "
                "of a component may make (MAX_CORE_INSTANCES)")
        upto = "" if plan.exact else "up to "
        global_slots = min(plan.globals, MAX_CORE_INSTANCES * largest_globals)
        if global_slots > self.max_globals:
            raise ModuleTooLarge(f"{name}: {upto}{global_slots} globals in its core "
                                 f"instances, over the host's max_globals {self.max_globals}")
        slots = min(plan.slots, MAX_CORE_INSTANCES * largest_imports)
        if slots > self.max_component_import_slots:
            raise ModuleTooLarge(
                f"{name}: {upto}{slots} import slots in its core instances, over the "
                f"host's max_component_import_slots {self.max_component_import_slots}")
        memories = min(plan.memories, MAX_CORE_INSTANCES * largest_memories)
        if memories > MAX_COMPONENT_MEMORIES:
            raise ModuleTooLarge(
                f"{name}: {upto}{memories} linear memories in its core instances, over the "
                f"{MAX_COMPONENT_MEMORIES} an instance of a component may make (each is "
                "capped at memory_bytes, so more would hold more than it)")

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
    defined_memories: int = 0  # in its memory section (an imported one is another's)


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


def _sections(wasm: bytes) -> Iterator[tuple[int, int, int]]:
    """Each top-level section of a module or component: (its id, where its contents
    start, their size); InvalidModule, from the reader, where the stream is malformed."""
    top = _Reader(wasm, 8, len(wasm))
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
# A component's core modules together: the Python SDK's declare 6,446 imports and
# exports. Their count is read from the section headers before any module is walked.
_COMPONENT_MAX_IMPORTS_AND_EXPORTS = 500_000
_VALIDATOR_MAX_FUNCTIONS = 1_000_000


def _counted(r: _Reader, most: int, what: str) -> int:
    """A section's entry count; InvalidModule over what wasmtime's validator accepts."""
    count = r.uleb()
    if count > most:
        raise InvalidModule(f"{count} {what}, over the {most} WebAssembly engines accept")
    return count


def _imports(r: _Reader, tables: list[int], memories: list[bool]) -> _Imports:
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


def _exports(r: _Reader) -> tuple[int, int]:
    """Walk the export section: (exports, bytes of their names)."""
    count = _counted(r, _VALIDATOR_MAX_EXPORTS, "exports")
    name_bytes = 0
    for _ in range(count):
        name_bytes += r.name()
        r.byte()
        r.uleb()
    return count, name_bytes


def _code(r: _Reader) -> tuple[int, int, int]:
    """Walk the code section: (bodies, total body bytes, largest body)."""
    count = _counted(r, _VALIDATOR_MAX_FUNCTIONS, "function bodies")
    total = largest = 0
    for _ in range(count):
        size = r.uleb()
        r.skip(size)
        total += size
        largest = max(largest, size)
    return count, total, largest


_CORE_MODULE, _NESTED_COMPONENT = 1, 4  # a component's sections holding code
# Components nested deeper than this are refused: a walk that stopped there would not
# count what the deeper ones declare. The SDKs' components nest one level.
MAX_COMPONENT_NESTING = 16


def _core_modules(wasm: bytes, depth: int = 0) -> list[bytes]:
    """The core modules of a component (of its nested components too), by their section
    headers; a malformed stream ends the walk (wasmtime's validator refuses it).
    ModuleTooLarge (without the component's name) when it nests components deeper than
    MAX_COMPONENT_NESTING."""
    found: list[bytes] = []
    if depth > MAX_COMPONENT_NESTING:
        raise ModuleTooLarge(f"nests components more than {MAX_COMPONENT_NESTING} deep, "
                             "deeper than the host reads (MAX_COMPONENT_NESTING)")
    try:
        for section, start, size in _sections(wasm):
            if section == _CORE_MODULE:
                found.append(wasm[start:start + size])
            elif section == _NESTED_COMPONENT:
                found += _core_modules(wasm[start:start + size], depth + 1)
    except ModuleTooLarge:
        raise
    except InvalidModule:
        pass
    return found


# A component's sections that add to the index spaces the planner follows.
_CORE_INSTANCE, _COMPONENT_INSTANCE, _ALIAS, _IMPORT_C, _EXPORT_C = 2, 5, 6, 10, 11
_CORE_SORT, _COMPONENT_SORT, _MODULE_CORE_SORT = 0x00, 0x04, 0x11
_SATURATED = 2**62  # nested instantiations multiply: the counts stop growing here


@dataclass(frozen=True)
class _Plan:
    """What one instance of a component makes: its core instances (its nested
    components' multiplied out), their import slots and their globals; `exact` when
    every module and component it instantiates was found in its bytes (else the counts
    are upper bounds)."""

    instances: int
    slots: int
    globals: int
    memories: int = 0  # linear memories its core instances define
    exact: bool = True

    def plus(self, other: _Plan) -> _Plan:
        """This plan and `other` made beside it."""
        return _Plan(min(self.instances + other.instances, _SATURATED),
                     min(self.slots + other.slots, _SATURATED),
                     min(self.globals + other.globals, _SATURATED),
                     min(self.memories + other.memories, _SATURATED),
                     self.exact and other.exact)


@dataclass
class _Scope:
    """One component's core module and component index spaces, in order: each
    module's (imports, globals), each component's plan (None: not in the bytes)."""

    modules: list[tuple[int, int, int] | None]
    components: list[_Plan | None]


# The entries (instances, aliases, imports, exports, arguments) the walk follows at
# most; past them it bounds the component as if it could not follow it. The Python
# SDK's component has 2,884 of them; 8 million four-byte aliases (30 MiB) took
# the walk 17 s.
_PLAN_ENTRIES = 100_000


class _TooManyEntries(Exception):
    """More entries than _PLAN_ENTRIES."""


class _Entries(_Reader):
    """A reader that charges each count of entries it reads to a budget shared by
    the whole walk, before the entries are walked."""

    __slots__ = ("budget",)

    def __init__(self, data: bytes, pos: int, end: int, budget: list[int]) -> None:
        super().__init__(data, pos, end)
        self.budget = budget

    def entries(self) -> int:
        """A count of entries; _TooManyEntries once the walk's budget is spent."""
        count = self.uleb()
        self.budget[0] -= count
        if self.budget[0] < 0:
            raise _TooManyEntries
        return count


def _plan(wasm: bytes, largest: tuple[int, int, int]) -> tuple[_Plan, int]:
    """The core instances one instance of the component `wasm` makes, with their import
    slots, globals and memories; `largest` (the most imports, globals and defined
    memories of any of its core modules) stands for a module the walk cannot name.
    Where the walk cannot follow the bytes, the bound is the store's:
    MAX_CORE_INSTANCES instances of the largest module. Beside the plan: the most core
    instances any component in it makes (one passed to a nested component, which the
    walk does not follow there, too)."""
    unknown = _Plan(MAX_CORE_INSTANCES, MAX_CORE_INSTANCES * largest[0],
                    MAX_CORE_INSTANCES * largest[1], MAX_CORE_INSTANCES * largest[2],
                    exact=False)
    defined: list[_Plan] = []
    try:
        plan = _plan_of(wasm, [], largest, unknown, [_PLAN_ENTRIES], defined)
    except (InvalidModule, IndexError, _TooManyEntries):
        return unknown, 0  # wasmtime's validator says what is wrong with it, if anything
    return plan, max((p.instances for p in [plan, *defined] if p.exact), default=0)


def _plan_of(wasm: bytes, outer: list[_Scope], largest: tuple[int, int, int],
             unknown: _Plan, budget: list[int], defined: list[_Plan]) -> _Plan:
    if len(outer) > MAX_COMPONENT_NESTING:
        return unknown
    scope = _Scope([], [])
    scopes = [*outer, scope]
    plan = _Plan(0, 0, 0)
    for section, start, size in _sections(wasm):
        r = _Entries(wasm, start, start + size, budget)
        if section == _CORE_MODULE:
            try:
                shape = inspect(wasm[start:start + size])
            except InvalidModule:
                scope.modules.append(None)
            else:
                scope.modules.append((shape.imports, shape.globals, shape.defined_memories))
        elif section == _NESTED_COMPONENT:
            nested = _plan_of(wasm[start:start + size], scopes, largest, unknown, budget,
                              defined)
            scope.components.append(nested)
            defined.append(nested)
        elif section == _CORE_INSTANCE:
            for module in _instantiated(r, core=True):
                counts = scope.modules[module]
                imports, globals_, memories = largest if counts is None else counts
                plan = plan.plus(_Plan(1, imports, globals_, memories, counts is not None))
        elif section == _COMPONENT_INSTANCE:
            for component in _instantiated(r, core=False):
                plan = plan.plus(scope.components[component] or unknown)
        elif section == _ALIAS:
            _aliases(r, scopes)
        elif section == _IMPORT_C:
            _imports_of_component(r, scope)
        elif section == _EXPORT_C:
            _exports_of_component(r, scope)
    return plan


def _instantiated(r: _Entries, core: bool) -> list[int]:
    """The module (`core`) or component indices a core instance or instance section
    instantiates, in order; bags of exports make no instance."""
    made = []
    for _ in range(r.entries()):
        kind = r.byte()
        if kind == 0x00:
            made.append(r.uleb())
            for _ in range(r.entries()):  # arguments: a name and what is passed
                r.name()
                if core:
                    r.byte()  # 0x12, a core instance
                else:
                    _sort(r)
                r.uleb()
        elif kind == 0x01:
            for _ in range(r.entries()):
                if not core:
                    _name_kind(r)
                r.name()
                if core:
                    r.byte()
                else:
                    _sort(r)
                r.uleb()
        else:
            raise InvalidModule(f"unknown instance kind {kind:#x}")
    return made


def _sort(r: _Entries) -> tuple[int, int]:
    """A sort: (its byte, the core sort's byte when it is a core one)."""
    sort = r.byte()
    return sort, r.byte() if sort == _CORE_SORT else -1


def _name_kind(r: _Entries) -> None:
    """The byte before an import or export name (0x00, or 0x01 as older binaries)."""
    if r.byte() not in (0x00, 0x01):
        raise InvalidModule("unknown name kind")


def _aliases(r: _Entries, scopes: list[_Scope]) -> None:
    """Walk an alias section: a module or component aliased from an enclosing
    component is that one; one exported by an instance is not in the bytes here."""
    scope = scopes[-1]
    for _ in range(r.entries()):
        sort, core_sort = _sort(r)
        target = r.byte()
        if target in (0x00, 0x01):  # an instance's export, a core instance's export
            r.uleb()
            r.name()
            found_module: tuple[int, int, int] | None = None
            found_component: _Plan | None = None
        elif target == 0x02:  # an enclosing component's: levels out, then the index
            levels, index = r.uleb(), r.uleb()
            if levels >= len(scopes):
                raise InvalidModule("alias out of the outermost component")
            there = scopes[-1 - levels]
            if sort == _CORE_SORT and core_sort == _MODULE_CORE_SORT:
                found_module = there.modules[index]
            elif sort == _COMPONENT_SORT:
                found_component = there.components[index]
        else:
            raise InvalidModule(f"unknown alias target {target:#x}")
        if sort == _CORE_SORT and core_sort == _MODULE_CORE_SORT:
            scope.modules.append(found_module)
        elif sort == _COMPONENT_SORT:
            scope.components.append(found_component)


def _imports_of_component(r: _Entries, scope: _Scope) -> None:
    """Walk a component's import section: an imported module or component is not in
    the bytes here (its parent passes it)."""
    for _ in range(r.entries()):
        _name_kind(r)
        r.name()
        kind = _extern_desc(r)
        if kind == _CORE_SORT:
            scope.modules.append(None)
        elif kind == _COMPONENT_SORT:
            scope.components.append(None)


def _extern_desc(r: _Entries) -> int:
    """Skip what an import or export is declared to be; returns its kind (0x00 a core
    module, 0x04 a component)."""
    kind = r.byte()
    if kind in (0x00, 0x02):  # a core module (0x11, its type), a value (a bound, an index)
        r.byte()
        r.uleb()
    elif kind == 0x03:  # a type: equal to an index, or a fresh resource
        if r.byte() == 0x00:
            r.uleb()
    elif kind in (0x01, 0x04, 0x05):  # a function, component or instance type
        r.uleb()
    else:
        raise InvalidModule(f"unknown extern kind {kind:#x}")
    return kind


def _exports_of_component(r: _Entries, scope: _Scope) -> None:
    """Walk a component's export section: an exported module or component takes a
    new index, the same one again."""
    for _ in range(r.entries()):
        _name_kind(r)
        r.name()
        sort, core_sort = _sort(r)
        index = r.uleb()
        if r.byte() == 0x01:  # an ascribed type follows
            _extern_desc(r)
        if sort == _CORE_SORT and core_sort == _MODULE_CORE_SORT:
            scope.modules.append(scope.modules[index])
        elif sort == _COMPONENT_SORT:
            scope.components.append(scope.components[index])


def _declared_imports_and_exports(wasm: bytes) -> int:
    """The counts a core module's import and export sections begin with, read from its
    section headers without walking the entries (0 for what is malformed)."""
    declared = 0
    try:
        for section, start, size in _sections(wasm):
            if section in (_IMPORT, _EXPORT):
                declared += _Reader(wasm, start, start + size).uleb()
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
    defined_memories = 0
    has_start = False
    for section, start, size in _sections(wasm):
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
                       element_bytes=element_bytes, defined_memories=defined_memories)
