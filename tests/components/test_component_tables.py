"""A component's tables, filled, cost the host outside `memory_bytes`: the store limiter
caps each table at `table_elements`, not their sum, and a filled funcref table holds 8
bytes an element (an externref one 4). A component whose core module declared 64 tables
and grew each to 100,000 elements held 49 MiB an instance (24 MiB as externref), and a
plugin keeps up to four instances; untouched, the same tables cost nothing (wasmtime
fills them lazily).

`ModuleCaps.check_component` counts the tables the core instances of one instance of
the component define (a module instantiated twice defines its tables twice) and refuses
more than MAX_COMPONENT_TABLES before the child compile; the store allows no more
either. So an instance holds at most MAX_COMPONENT_TABLES times `table_elements`, as an
instance of a core module does (four tables). The SDKs' components define two.
"""

from __future__ import annotations

import time

import pytest
import wasmtime

from support import refused_at_load, rss_mib
from wasmext import Plugin, Runtime
from wasmext.sandbox.wasmcheck import MAX_COMPONENT_TABLES, ModuleCaps

BOUND_S = 10.0  # a refusal reads section headers; the machine running CI is shared
ELEMENTS = 100_000  # the default table_elements
FILLED_MIB = MAX_COMPONENT_TABLES * ELEMENTS * 8 / 2**20  # 3 MiB: the allowed tables, full
_FILL = '''(func (export "fill") (param "n" u32) (result s32)
      (canon lift (core func $i0 "fill")))'''


def _filler(tables: int, reftype: str = "funcref") -> bytes:
    """A component whose one core module defines `tables` tables and exports `fill`
    (n: u32): each table grown by n (non-null funcrefs, or null externrefs), answering
    how many grows succeeded."""
    init = "(ref.func $f)" if reftype == "funcref" else "(ref.null extern)"
    declared = "".join(f"(table $t{i} 0 {reftype})" for i in range(tables))
    grows = "".join(f'''(local.set $ok (i32.add (local.get $ok) (i32.ne (i32.const -1)
        (table.grow $t{i} {init} (local.get 0)))))''' for i in range(tables))
    return bytes(wasmtime.wat2wasm(f'''(component
      (core module $m {declared}
        (func $f) (elem declare func $f)
        (func (export "fill") (param i32) (result i32) (local $ok i32) {grows}
          (local.get $ok)))
      (core instance $i0 (instantiate $m))
      {_FILL})'''))


def _copies(copies: int) -> bytes:
    """A component instantiating `copies` times a core module of one table (each
    instance defines its own), and a nested component of one such instance, twice."""
    made = "".join(f"(core instance $i{i} (instantiate $m))" for i in range(copies))
    return bytes(wasmtime.wat2wasm(f'''(component
      (core module $m (table 0 funcref)
        (func (export "fill") (param i32) (result i32) (i32.const 0)))
      {made}
      (component $c (core module $n (table 0 funcref)) (core instance (instantiate $n)))
      (instance (instantiate $c))
      (instance (instantiate $c))
      {_FILL})'''))


def _fill(plugin: Plugin, elements: int) -> int:
    answer = plugin.call("on_tool", {"name": "fill", "args": {"n": elements}})
    return int(answer.value["result"])


@pytest.mark.parametrize(("component", "tables"), [
    (lambda: _filler(64), 64),  # the measured one: 49 MiB an instance, filled
    (lambda: _filler(64, "externref"), 64),  # 24 MiB an instance, filled
    (lambda: _filler(MAX_COMPONENT_TABLES + 1), MAX_COMPONENT_TABLES + 1),  # just over
    # Three core instances of a module of one table, and two of a nested component's.
    (lambda: _copies(MAX_COMPONENT_TABLES - 1), MAX_COMPONENT_TABLES + 1),
], ids=["measured-funcref", "measured-externref", "just-over", "instantiated-again"])
def test_more_tables_than_an_instance_may_make_are_refused_before_compiling(
        runtime: Runtime, healthy: Plugin, component: object, tables: int) -> None:
    assert callable(component)
    refused_at_load(runtime, component(),
                    f"{tables} tables in its core instances, over the {MAX_COMPONENT_TABLES}"
                    " an instance of a component may make \\(MAX_COMPONENT_TABLES: each is"
                    " capped at table_elements", healthy, plugin_id="tables")


@pytest.mark.parametrize("reftype", ["funcref", "externref"])
def test_the_allowed_tables_each_fill_to_table_elements_and_no_further(
        runtime: Runtime, healthy: Plugin, reftype: str) -> None:
    plugin = runtime.load(_filler(MAX_COMPONENT_TABLES, reftype), plugin_id="filled")
    _fill(plugin, 0)  # the instance is made (and kept) before the baseline
    before = rss_mib()
    started = time.monotonic()
    assert _fill(plugin, ELEMENTS) == MAX_COMPONENT_TABLES  # every table full
    assert _fill(plugin, 1) == 0  # table.grow's refusal (-1), in each of them
    assert time.monotonic() - started < BOUND_S
    # What the tables hold, and no more: their sum is bounded by the count.
    assert rss_mib() - before < FILLED_MIB + 8
    assert healthy.call("test", "ping").value == "alive"


def test_a_stricter_table_elements_bounds_each_table(runtime: Runtime,
                                                    healthy: Plugin) -> None:
    plugin = runtime.load(_filler(MAX_COMPONENT_TABLES), plugin_id="strict",
                          limits={"table_elements": 1_000})
    assert _fill(plugin, 1_000) == MAX_COMPONENT_TABLES
    assert _fill(plugin, 1) == 0
    assert healthy.call("test", "ping").value == "alive"


def test_tables_imported_from_another_core_instance_are_counted_once() -> None:
    # Componentized interpreters define a table in one module and import it in the
    # others: five instances sharing one table are one table.
    shared = "".join('(core instance (instantiate $user (with "m" (instance $d))))'
                     for _ in range(5))
    wasm = bytes(wasmtime.wat2wasm(f'''(component
      (core module $def (table (export "t") 1 funcref))
      (core module $user (import "m" "t" (table 1 funcref)))
      (core instance $d (instantiate $def))
      {shared})'''))
    ModuleCaps().check_component(wasm, "shared")
