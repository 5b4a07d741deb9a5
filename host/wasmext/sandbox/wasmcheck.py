"""The host's caps on a module's and a component's shape, checked before wasmtime
compiles anything.

Compile time grows with the number of functions and the size of each body,
so a module of 60,000 empty functions or one body of a million instructions
costs seconds of host CPU before any budget of a call applies. `inspect`
(`sandbox.wasmread`) walks the section headers (LEB128 lengths), counts what
compiling would cost and what instantiating would allocate (declared table
minimums), and `ModuleCaps.check` refuses a module over the host's policy with
`ModuleTooLarge`.

What a module declares also costs the host outside any call and outside
`memory_bytes`: each global is 16 bytes of every instance's metadata (999,000
globals made each instance about 16 MiB, times the instances alive), and each
import and export a name and a type the host reads into Python at load (100,000
long export names: a second of load and 200 MiB). Those are counted too. Bytes
that are not a well-formed section stream are `InvalidModule`.

A component's core instances hold what their modules declare, once per instance made:
`ModuleCaps.check_component` follows the component's index spaces
(`sandbox.componentwalk`) to the core instances one instance of it makes (nested
components' instantiations multiplied out: doubling 22 levels deep planned 4 million
from 1.2 KB) and caps their globals and import slots
(one module of 99,000 imports made 60 times: 180 MiB an instance), their linear
memories at one (the store limiter caps each memory at `memory_bytes`, not their sum:
three memories grown to it held three times `memory_bytes`) and their tables at four
(the limiter caps each table at `table_elements`: 64 tables grown to it held 49 MiB).

It also records each memory's index type: the ABI's pointers and lengths are
i32 into the one memory the host reads and writes (abi/SPEC.md 1), so
`check_memories` refuses a 64-bit memory, or a second one, with `AbiMismatch`
before compiling. The engine leaves both features out as well
(`engine.SharedEngine`); this names the plugin and the reason in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from wasmext.errors import AbiMismatch, InvalidModule, ModuleTooLarge
from wasmext.sandbox.componentwalk import (
    MAX_COMPONENT_NESTING,
    MAX_CORE_INSTANCES,
    core_modules,
    plan,
)
from wasmext.sandbox.wasmread import (
    ModuleShape,
    declared_imports_and_exports,
    inspect,
    is_component,
)

__all__ = ["MAX_COMPONENT_MEMORIES", "MAX_COMPONENT_NESTING", "MAX_COMPONENT_TABLES",
           "MAX_CORE_INSTANCES",
           "ModuleCaps", "ModuleShape",
           "check_memories", "inspect", "is_component"]

# Linear memories one instance of a component may make (its store's limit): the store
# limiter caps each at `memory_bytes`, not their sum (three memories grown to the cap
# held three times it). Those components define one; their other modules import it.
MAX_COMPONENT_MEMORIES = 1
# Tables one instance of a component may make (its store's limit), as many as a core
# module's instance: the limiter caps each at `table_elements`, not their sum, and a
# filled funcref table holds 8 bytes an element outside `memory_bytes` (64 tables grown
# to 100,000 held 49 MiB an instance). The Python and JavaScript SDKs' components define
# two: the interpreter's function table and the one of the shim for lowered imports.
MAX_COMPONENT_TABLES = 4
# A component's core modules together: the Python SDK's declare 6,446 imports and
# exports. Their count is read from the section headers before any module is walked.
_COMPONENT_MAX_IMPORTS_AND_EXPORTS = 500_000


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
        MAX_COMPONENT_MEMORIES or tables than MAX_COMPONENT_TABLES (the limiter caps
        each, not their sum), or more core instances than MAX_CORE_INSTANCES, in it or
        in any component it defines (nested components instantiated twice, and twice
        inside, add up to millions from a kilobyte; the store would refuse every
        instance). The other caps bound one plugin module's compile: a component's
        interpreter is far over them, and compiles in a child (`sandbox.compiler`)."""
        largest_imports = largest_globals = largest_memories = largest_tables = 0
        globals_total = 0
        try:
            cores = core_modules(wasm)
        except ModuleTooLarge as exc:
            raise ModuleTooLarge(f"{name}: {exc}") from None
        declared = sum(declared_imports_and_exports(core) for core in cores)
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
            largest_tables = max(largest_tables, shape.defined_tables)
            globals_total += shape.globals
        # Loading costs the host each module's globals even where none is instantiated
        # (999,000 in a module no instance makes: 71 MiB to load).
        if globals_total > self.max_globals:
            raise ModuleTooLarge(f"{name}: {globals_total} globals in its core modules, over "
                                 f"the host's max_globals {self.max_globals}")
        planned, most_instances = plan(wasm, (largest_imports, largest_globals,
                                              largest_memories, largest_tables))
        if most_instances > MAX_CORE_INSTANCES:
            raise ModuleTooLarge(
                f"{name}: plans {most_instances} core instances (nested components' "
                f"instantiations multiplied out), over the {MAX_CORE_INSTANCES} an instance "
                "of a component may make (MAX_CORE_INSTANCES)")
        upto = "" if planned.exact else "up to "
        global_slots = min(planned.globals, MAX_CORE_INSTANCES * largest_globals)
        if global_slots > self.max_globals:
            raise ModuleTooLarge(f"{name}: {upto}{global_slots} globals in its core "
                                 f"instances, over the host's max_globals {self.max_globals}")
        slots = min(planned.slots, MAX_CORE_INSTANCES * largest_imports)
        if slots > self.max_component_import_slots:
            raise ModuleTooLarge(
                f"{name}: {upto}{slots} import slots in its core instances, over the "
                f"host's max_component_import_slots {self.max_component_import_slots}")
        memories = min(planned.memories, MAX_CORE_INSTANCES * largest_memories)
        if memories > MAX_COMPONENT_MEMORIES:
            raise ModuleTooLarge(
                f"{name}: {upto}{memories} linear memories in its core instances, over the "
                f"{MAX_COMPONENT_MEMORIES} an instance of a component may make (each is "
                "capped at memory_bytes, so more would hold more than it)")
        tables = min(planned.tables, MAX_CORE_INSTANCES * largest_tables)
        if tables > MAX_COMPONENT_TABLES:
            raise ModuleTooLarge(
                f"{name}: {upto}{tables} tables in its core instances, over the "
                f"{MAX_COMPONENT_TABLES} an instance of a component may make "
                "(MAX_COMPONENT_TABLES: each is capped at table_elements, so more would "
                f"hold more than {MAX_COMPONENT_TABLES} times it)")

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



def check_memories(shape: ModuleShape, name: str = "<module>") -> None:
    """Raise AbiMismatch unless the module has at most one memory, and that one 32-bit."""
    if any(shape.memories):
        raise AbiMismatch(f"{name}: has a 64-bit memory (memory64); ABI v1 plugins are "
                          "wasm32, with i32 pointers and lengths")
    if len(shape.memories) > 1:
        raise AbiMismatch(f"{name}: has {len(shape.memories)} memories; ABI v1 plugins have "
                          "one, the exported 'memory'")

