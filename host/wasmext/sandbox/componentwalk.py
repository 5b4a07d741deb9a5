"""A component's core modules and the core instances one instance of it makes, read
from its bytes before wasmtime compiles anything.

`core_modules` finds the core modules of a component and of the components it nests;
`plan` follows the component's index spaces to the core instances one instance of it
makes (nested components' instantiations multiplied out: doubling 22 levels deep
planned 4 million from 1.2 KB), with their import slots, globals, memories and tables.
`sandbox.wasmcheck` holds the host's caps on those counts (`ModuleCaps.check_component`).
Where the walk cannot follow the bytes, it bounds the component by the store's limit
of MAX_CORE_INSTANCES instances of its largest module.
"""

from __future__ import annotations

from dataclasses import dataclass

from wasmext.errors import InvalidModule, ModuleTooLarge
from wasmext.sandbox.wasmread import Reader, inspect, sections

__all__ = ["MAX_COMPONENT_NESTING", "MAX_CORE_INSTANCES", "ModuleCounts", "Plan",
           "core_modules", "plan"]

# Core instances one instance of a component may make (its store's limit): a
# componentized CPython or SpiderMonkey makes about a dozen. Generous, but finite.
MAX_CORE_INSTANCES = 64
# What a core instance of a module holds beside its code: its module's imports, globals,
# defined linear memories and defined tables (an imported memory or table is another's).
ModuleCounts = tuple[int, int, int, int]

_CORE_MODULE, _NESTED_COMPONENT = 1, 4  # a component's sections holding code
# Components nested deeper than this are refused: a walk that stopped there would not
# count what the deeper ones declare. The SDKs' components nest one level.
MAX_COMPONENT_NESTING = 16


def core_modules(wasm: bytes, depth: int = 0) -> list[bytes]:
    """The core modules of a component (of its nested components too), by their section
    headers; a malformed stream ends the walk (wasmtime's validator refuses it).
    ModuleTooLarge (without the component's name) when it nests components deeper than
    MAX_COMPONENT_NESTING."""
    found: list[bytes] = []
    if depth > MAX_COMPONENT_NESTING:
        raise ModuleTooLarge(f"nests components more than {MAX_COMPONENT_NESTING} deep, "
                             "deeper than the host reads (MAX_COMPONENT_NESTING)")
    try:
        for section, start, size in sections(wasm):
            if section == _CORE_MODULE:
                found.append(wasm[start:start + size])
            elif section == _NESTED_COMPONENT:
                found += core_modules(wasm[start:start + size], depth + 1)
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
class Plan:
    """What one instance of a component makes: its core instances (its nested
    components' multiplied out), their import slots, globals, memories and tables; `exact` when
    every module and component it instantiates was found in its bytes (else the counts
    are upper bounds)."""

    instances: int
    slots: int
    globals: int
    memories: int = 0  # linear memories its core instances define
    tables: int = 0  # tables its core instances define
    exact: bool = True

    def plus(self, other: Plan) -> Plan:
        """This plan and `other` made beside it."""
        return Plan(min(self.instances + other.instances, _SATURATED),
                    min(self.slots + other.slots, _SATURATED),
                    min(self.globals + other.globals, _SATURATED),
                    min(self.memories + other.memories, _SATURATED),
                    min(self.tables + other.tables, _SATURATED),
                    self.exact and other.exact)


@dataclass
class _Scope:
    """One component's core module and component index spaces, in order: each
    module's counts, each component's plan (None: not in the bytes)."""

    modules: list[ModuleCounts | None]
    components: list[Plan | None]


# The entries (instances, aliases, imports, exports, arguments) the walk follows at
# most; past them it bounds the component as if it could not follow it. The Python
# SDK's component has 2,884 of them; 8 million four-byte aliases (30 MiB) took
# the walk 17 s.
_PLAN_ENTRIES = 100_000


class _TooManyEntries(Exception):
    """More entries than _PLAN_ENTRIES."""


class _Entries(Reader):
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


def plan(wasm: bytes, largest: ModuleCounts) -> tuple[Plan, int]:
    """The core instances one instance of the component `wasm` makes, with their import
    slots, globals, memories and tables; `largest` (the most imports, globals, defined
    memories and defined tables of any of its core modules) stands for a module the
    walk cannot name.
    Where the walk cannot follow the bytes, the bound is the store's:
    MAX_CORE_INSTANCES instances of the largest module. Beside the plan: the most core
    instances any component in it makes (one passed to a nested component, which the
    walk does not follow there, too)."""
    imports, globals_, memories, tables = largest
    unknown = Plan(MAX_CORE_INSTANCES, MAX_CORE_INSTANCES * imports,
                   MAX_CORE_INSTANCES * globals_, MAX_CORE_INSTANCES * memories,
                   MAX_CORE_INSTANCES * tables, exact=False)
    defined: list[Plan] = []
    try:
        plan = _plan_of(wasm, [], largest, unknown, [_PLAN_ENTRIES], defined)
    except (InvalidModule, IndexError, _TooManyEntries):
        return unknown, 0  # wasmtime's validator says what is wrong with it, if anything
    return plan, max((p.instances for p in [plan, *defined] if p.exact), default=0)


def _plan_of(wasm: bytes, outer: list[_Scope], largest: ModuleCounts,
             unknown: Plan, budget: list[int], defined: list[Plan]) -> Plan:
    if len(outer) > MAX_COMPONENT_NESTING:
        return unknown
    scope = _Scope([], [])
    scopes = [*outer, scope]
    plan = Plan(0, 0, 0)
    for section, start, size in sections(wasm):
        r = _Entries(wasm, start, start + size, budget)
        if section == _CORE_MODULE:
            try:
                shape = inspect(wasm[start:start + size])
            except InvalidModule:
                scope.modules.append(None)
            else:
                scope.modules.append((shape.imports, shape.globals, shape.defined_memories,
                                      shape.defined_tables))
        elif section == _NESTED_COMPONENT:
            nested = _plan_of(wasm[start:start + size], scopes, largest, unknown, budget,
                              defined)
            scope.components.append(nested)
            defined.append(nested)
        elif section == _CORE_INSTANCE:
            for module in _instantiated(r, core=True):
                counts = scope.modules[module]
                plan = plan.plus(Plan(1, *(largest if counts is None else counts),
                                      exact=counts is not None))
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
            found_module: ModuleCounts | None = None
            found_component: Plan | None = None
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
