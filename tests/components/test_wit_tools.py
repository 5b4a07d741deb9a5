"""Tools from a component's typed WIT exports (sandbox.backends.wit_tools).

The fast tests use small components written in the component text format (no
toolchain, compiled in milliseconds); the slow one builds the Python component
tests/plugins/wit-calc with componentize-py and calls it through the host.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema_rs
import mcp_types as types
import msgpack
import pytest
import wasmtime
from mcp.client.client import Client
from wasmtime import component as wc

from support import Built
from wasmext import (
    AbiMismatch,
    GuestTrap,
    Host,
    HostConfig,
    InvalidOutput,
    OutOfFuel,
    Plugin,
    PluginError,
    Runtime,
    Timeout,
)
from wasmext.errors import WitValueRefused as ValueRefused
from wasmext.mcp.server.serve import McpToolServer
from wasmext.sandbox.backends.wit_tools import (
    MAX_TYPE_NODES,
    from_wit,
    schema_of,
    to_wit,
)
from wasmext.testing import make_host, wat_bytes

BOUND_S = 10.0
ROOT = Path(__file__).resolve().parents[2]

# add, a record argument, a variant answer, a trap, a loop, and an answer over the cap.
CALC = r'''
(component
  (core module $m
    (memory (export "memory") 1)
    (global $bump (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $bump local.set $p
      global.get $bump local.get 3 i32.add global.set $bump
      local.get $p)
    (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)
    (func (export "manhattan") (param i32 i32) (result i32)
      (i32.add
        (select (local.get 0) (i32.sub (i32.const 0) (local.get 0))
                (i32.ge_s (local.get 0) (i32.const 0)))
        (select (local.get 1) (i32.sub (i32.const 0) (local.get 1))
                (i32.ge_s (local.get 1) (i32.const 0)))))
    (func (export "classify") (param i32) (result i32)
      (if (i32.lt_s (local.get 0) (i32.const 0))
        (then (i32.store8 (i32.const 16) (i32.const 0))
              (i32.store (i32.const 20) (local.get 0)))
        (else (if (i32.eqz (local.get 0))
          (then (i32.store8 (i32.const 16) (i32.const 1)))
          (else (i32.store8 (i32.const 16) (i32.const 2))
                (i32.store8 (i32.const 20) (local.get 0))))))
      i32.const 16)
    (func (export "big") (result i32)
      (i32.store (i32.const 32) (i32.const 0))
      (i32.store (i32.const 36) (i32.const 60000))
      i32.const 32)
    (data (i32.const 256) "division by zero")
    (func (export "divide") (param i32 i32) (result i32)
      (if (i32.eqz (local.get 1))
        (then (i32.store8 (i32.const 48) (i32.const 1))
              (i32.store (i32.const 52) (i32.const 256))
              (i32.store (i32.const 56) (i32.const 16)))
        (else (i32.store8 (i32.const 48) (i32.const 0))
              (i32.store (i32.const 52) (i32.div_s (local.get 0) (local.get 1)))))
      i32.const 48)
    (func (export "boom") (result i32) unreachable)
    (func (export "spin") (result i32) (loop $l (br $l)) i32.const 0)
  )
  (core instance $i (instantiate $m))
  (type $point (record (field "x" s32) (field "y" s32)))
  (export $p "point" (type $point))
  (type $shape (variant (case "negative" s32) (case "zero") (case "positive" u8)))
  (export $s "shape" (type $shape))
  (func (export "add") (param "a" s32) (param "b" s32) (result s32)
    (canon lift (core func $i "add")))
  (func (export "manhattan") (param "p" $p) (result s32)
    (canon lift (core func $i "manhattan")))
  (func (export "classify") (param "n" s32) (result $s)
    (canon lift (core func $i "classify") (memory (core memory $i "memory"))))
  (func (export "big") (result (list u8))
    (canon lift (core func $i "big") (memory (core memory $i "memory"))
      (realloc (core func $i "realloc"))))
  (func (export "divide") (param "a" s32) (param "b" s32) (result (result s32 (error string)))
    (canon lift (core func $i "divide") (memory (core memory $i "memory"))
      (realloc (core func $i "realloc"))))
  (func (export "boom") (result s32) (canon lift (core func $i "boom")))
  (func (export "spin") (result s32) (canon lift (core func $i "spin")))
)
'''

# Value types of every kind, exported as named types, for the schema mapping.
KINDS = r'''
(component
  (type $rec (record (field "name" string) (field "tags" (list string))))
  (export "t-rec" (type $rec))
  (type $var (variant (case "none-here") (case "num" f64) (case "text" string)))
  (export "t-var" (type $var))
  (type $enum (enum "red" "green"))
  (export "t-enum" (type $enum))
  (type $flags (flags "read" "write"))
  (export "t-flags" (type $flags))
  (type $opt (option u16))
  (export "t-opt" (type $opt))
  (type $optopt (option (option bool)))
  (export "t-optopt" (type $optopt))
  (type $res (result s8 (error string)))
  (export "t-res" (type $res))
  (type $tup (tuple char u64))
  (export "t-tup" (type $tup))
  (type $bytes (list u8))
  (export "t-bytes" (type $bytes))
)
'''


def _types() -> dict[str, Any]:
    engine = wasmtime.Engine()
    component = wc.Component(engine, KINDS)
    return {name: extern.ty for name, extern in component.type.exports(engine).items()}


def test_wit_types_map_to_json_schemas() -> None:
    """The fast unit test of the mapping: each kind's schema, exactly."""
    t = _types()
    assert schema_of(t["t-rec"]) == {
        "type": "object", "additionalProperties": False, "required": ["name", "tags"],
        "properties": {"name": {"type": "string"},
                       "tags": {"type": "array", "items": {"type": "string"}}}}
    assert schema_of(t["t-var"]) == {"oneOf": [
        {"const": "none-here"},
        {"type": "object", "properties": {"num": {"type": "number"}}, "required": ["num"],
         "additionalProperties": False},
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
         "additionalProperties": False}]}
    assert schema_of(t["t-enum"]) == {"type": "string", "enum": ["red", "green"]}
    assert schema_of(t["t-flags"]) == {"type": "array", "uniqueItems": True,
                                       "items": {"enum": ["read", "write"]}}
    assert schema_of(t["t-opt"]) == {"anyOf": [
        {"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 65535}]}
    assert schema_of(t["t-optopt"])["anyOf"][1]["required"] == ["some"]
    assert schema_of(t["t-res"]) == {"oneOf": [
        {"type": "object", "properties": {"ok": {"type": "integer", "minimum": -128,
                                                 "maximum": 127}},
         "required": ["ok"], "additionalProperties": False},
        {"type": "object", "properties": {"err": {"type": "string"}}, "required": ["err"],
         "additionalProperties": False}]}
    assert schema_of(t["t-tup"]) == {
        "type": "array", "minItems": 2, "maxItems": 2,
        "prefixItems": [{"type": "string", "minLength": 1, "maxLength": 1},
                        {"type": "integer", "minimum": 0, "maximum": (1 << 64) - 1}]}
    assert schema_of(t["t-bytes"]) == {"type": "array", "items": {
        "type": "integer", "minimum": 0, "maximum": 255}}
    assert schema_of(t["t-var"], output=True)["oneOf"][1]["properties"]["num"] == {
        "type": ["number", "null"]}


GOOD = [
    ("t-rec", {"name": "a", "tags": ["x", "y"]}), ("t-var", "none-here"),
    ("t-var", {"num": 1.5}), ("t-var", {"text": "hi"}), ("t-enum", "green"),
    ("t-flags", ["write", "read"]), ("t-opt", None), ("t-opt", 65535),
    ("t-optopt", None), ("t-optopt", {"some": None}), ("t-optopt", {"some": True}),
    ("t-res", {"ok": -128}), ("t-res", {"err": "no"}), ("t-tup", ["é", 2**64 - 1]),
    ("t-bytes", [0, 255, 7]),
]
BAD = [
    ("t-rec", {"name": "a"}), ("t-rec", {"name": "a", "tags": [], "extra": 1}),
    ("t-rec", {"name": 1, "tags": []}), ("t-var", "num"), ("t-var", {"num": 1, "text": "x"}),
    ("t-var", {"zero": None}), ("t-enum", "blue"), ("t-flags", ["read", "read"]),
    ("t-flags", ["exec"]), ("t-opt", 65536), ("t-opt", -1), ("t-opt", True),
    ("t-optopt", True), ("t-res", {"ok": 128}), ("t-res", "ok"), ("t-tup", ["ab", 1]),
    ("t-tup", ["a"]), ("t-bytes", [256]), ("t-bytes", "AAE="),
]


@pytest.mark.parametrize(("kind", "value"), GOOD)
def test_a_fitting_value_passes_schema_and_conversion_and_comes_back(kind: str,
                                                                     value: Any) -> None:
    ty = _types()[kind]
    jsonschema_rs.validate(schema_of(ty), value)
    lowered = to_wit(ty, value)
    assert from_wit(ty, lowered) == (sorted(value) if kind == "t-flags" else value)


@pytest.mark.parametrize(("kind", "value"), BAD)
def test_a_value_the_type_refuses_fails_schema_and_conversion(kind: str, value: Any) -> None:
    ty = _types()[kind]
    assert not jsonschema_rs.is_valid(schema_of(ty), value)
    with pytest.raises(ValueRefused):
        to_wit(ty, value)


def test_a_lone_surrogate_is_refused_before_the_guest() -> None:
    with pytest.raises(ValueRefused, match="Unicode"):
        to_wit(_types()["t-rec"], {"name": "\ud800", "tags": []})


@pytest.fixture
def calc() -> Iterator[Host]:
    host = make_host((bytes(wasmtime.wat2wasm(CALC)),
                      {"plugin_id": "calc", "limits": {"max_output_bytes": 50_000,
                                                       "fuel_per_call": 5_000_000}}))
    with host:
        yield host


def call(host: Host, tool: str, args: Any) -> dict[str, Any]:
    with host.session() as session:
        return host.tools.call(tool, args, session)


def test_typed_exports_are_listed_as_tools_with_derived_schemas(calc: Host) -> None:
    tools = {n: t for n, t in calc.tools.tools.items() if t.owner == "plugin:calc"}
    assert sorted(tools) == ["calc__add", "calc__big", "calc__boom", "calc__classify",
                             "calc__divide", "calc__manhattan", "calc__spin"]
    s32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
    assert dict(tools["calc__add"].input_schema) == {
        "type": "object", "properties": {"a": s32, "b": s32}, "required": ["a", "b"],
        "additionalProperties": False}
    assert dict(tools["calc__add"].output_schema or {}) == {
        "type": "object", "properties": {"result": s32}, "required": ["result"]}
    assert tools["calc__manhattan"].input_schema["properties"]["p"] == {
        "type": "object", "properties": {"x": s32, "y": s32}, "required": ["x", "y"],
        "additionalProperties": False}
    shape = tools["calc__classify"].output_schema["properties"]["result"]  # type: ignore[index]
    assert shape["oneOf"][1] == {"const": "zero"}


def test_calls_convert_arguments_and_answers(calc: Host) -> None:
    assert call(calc, "calc__add", {"a": 2, "b": 40}) == {"status": "ok",
                                                          "output": {"result": 42}}
    assert call(calc, "calc__manhattan", {"p": {"x": -3, "y": 4}})["output"] == {"result": 7}
    assert call(calc, "calc__classify", {"n": -5})["output"] == {"result": {"negative": -5}}
    assert call(calc, "calc__classify", {"n": 0})["output"] == {"result": "zero"}
    assert call(calc, "calc__classify", {"n": 9})["output"] == {"result": {"positive": 9}}
    # A function's own result<T, E>: T is the answer, E the tool's error.
    assert dict(calc.tools.tools["calc__divide"].output_schema or {})["properties"] == {
        "result": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}}
    assert call(calc, "calc__divide", {"a": 7, "b": 2})["output"] == {"result": 3}
    assert call(calc, "calc__divide", {"a": 7, "b": 0})["error"] == {
        "code": "failed", "message": "division by zero"}


@pytest.mark.parametrize("args", [
    {"a": 2**31, "b": 1}, {"a": "1", "b": 2}, {"a": 1}, {"a": 1, "b": 2, "c": 3},
    {"a": True, "b": 2}, {"a": 1.5, "b": 2},
])
def test_bad_arguments_are_refused_by_the_schema(calc: Host, args: Any) -> None:
    result = call(calc, "calc__add", args)
    assert result["status"] == "error" and result["error"]["code"] == "invalid"
    assert call(calc, "calc__add", {"a": 1, "b": 1})["output"] == {"result": 2}


def test_a_direct_hook_call_is_checked_by_the_type_too(calc: Host) -> None:
    """Past the registry (no schema check): the conversion refuses what the type does not."""
    plugin = calc.plugins["calc"].plugin
    with pytest.raises(PluginError, match="expected an integer") as err:
        plugin.call("on_tool", {"name": "manhattan", "args": {"p": {"x": 2**40, "y": 0}}})
    assert err.value.code == "invalid"
    with pytest.raises(PluginError) as missing:
        plugin.call("on_tool", {"name": "nope", "args": {}})
    assert missing.value.code == "not_found"
    assert plugin.call("on_tool", {"name": "add", "args": {"a": 1, "b": 2}}).value == {
        "result": 3}


def test_a_trap_is_the_named_error_and_the_plugin_answers_after(calc: Host,
                                                                healthy: Plugin) -> None:
    plugin = calc.plugins["calc"].plugin
    with pytest.raises(GuestTrap, match="unreachable"):
        plugin.call("on_tool", {"name": "boom", "args": {}})
    result = call(calc, "calc__boom", {})
    assert result["status"] == "error" and result["error"]["code"] == "trap"
    started = time.monotonic()
    with pytest.raises(OutOfFuel, match="5000000 fuel"):
        plugin.call("on_tool", {"name": "spin", "args": {}})
    assert time.monotonic() - started < BOUND_S
    assert call(calc, "calc__add", {"a": 20, "b": 22})["output"] == {"result": 42}
    assert healthy.call("test").value == "alive"


def test_an_answer_over_the_output_cap_is_refused(calc: Host) -> None:
    plugin = calc.plugins["calc"].plugin
    with pytest.raises(InvalidOutput, match="max_output_bytes 50000"):
        plugin.call("on_tool", {"name": "big", "args": {}})
    assert call(calc, "calc__add", {"a": 1, "b": 2})["output"] == {"result": 3}


def _exploding(levels: int) -> str:
    """A record type each level of which holds the one below twice: 2**levels parts."""
    types = ['(type $t0 (record (field "a" u8))) (export $e0 "t0" (type $t0))']
    for n in range(1, levels + 1):
        types.append(f'(type $t{n} (record (field "a" $e{n - 1}) (field "b" $e{n - 1}))) '
                     f'(export $e{n} "t{n}" (type $t{n}))')
    return f'''
(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024)
    (func (export "ok") (result i32) i32.const 7)
    (func (export "huge") (param i32) (result i32) i32.const 0))
  (core instance $i (instantiate $m))
  {" ".join(types)}
  (func (export "ok") (result u8) (canon lift (core func $i "ok")))
  (func (export "huge") (param "x" $e{levels}) (result u8)
    (canon lift (core func $i "huge") (memory (core memory $i "memory"))
      (realloc (core func $i "realloc"))))
)'''


def test_an_exploding_type_graph_is_not_offered_and_the_rest_is() -> None:
    levels = MAX_TYPE_NODES.bit_length() + 1  # over the node cap once expanded
    started = time.monotonic()
    with make_host((bytes(wasmtime.wat2wasm(_exploding(levels))),
                    {"plugin_id": "boom-types"})) as host:
        assert time.monotonic() - started < BOUND_S
        names = sorted(n for n in host.tools.tools if n.startswith("boom-types__"))
        assert names == ["boom-types__ok"]
        assert call(host, "boom-types__ok", {})["output"] == {"result": 7}
        lines = [ln.text for ln in host.plugins["boom-types"].plugin.log.lines]
        assert any("'huge' is not offered" in t and str(MAX_TYPE_NODES) in t for t in lines)


def test_a_component_with_neither_world_nor_typed_functions_is_refused() -> None:
    empty = bytes(wasmtime.wat2wasm("(component)"))
    with pytest.raises(AbiMismatch, match="register"), make_host((empty, {"plugin_id": "e"})):
        pass


@pytest.mark.slow
def test_a_python_component_exports_typed_tools(components: Built, crt: Runtime) -> None:
    """componentize-py's wit-calc: options, lists, results and a guest exception."""
    with Host(HostConfig(), runtime=crt, plugin_dirs=[]) as host:
        host.add(components["wit-calc"])
        tools = {n for n in host.tools.tools if n.startswith("wit-calc__")}
        assert {"wit-calc__add", "wit-calc__greet", "wit-calc__convert",
                "wit-calc__classify", "wit-calc__mirror"} <= tools
        assert call(host, "wit-calc__add", {"a": 2, "b": 40})["output"] == {"result": 42}
        assert call(host, "wit-calc__greet", {"names": ["ann", "bo"], "times": 2,
                                               "loud": True})["output"] == {
            "result": ["HELLO ANN", "HELLO ANN", "HELLO BO", "HELLO BO"]}
        assert call(host, "wit-calc__greet", {"names": ["ann"], "loud": False})[
            "output"] == {"result": ["hello ann"]}
        assert call(host, "wit-calc__classify", {"n": 3})["output"] == {
            "result": {"positive": "3 is positive"}}
        assert call(host, "wit-calc__mirror", {"p": {"x": 1, "y": -2}})["output"] == {
            "result": {"x": -1, "y": 2}}
        assert call(host, "wit-calc__convert", {"length": 10, "source": "foot"})[
            "output"]["result"] == pytest.approx(3.048)
        failed = call(host, "wit-calc__convert", {"length": -1, "source": "metre"})
        assert failed["error"] == {"code": "failed", "message": "a length is not negative"}
        bad = call(host, "wit-calc__greet", {"names": "ann", "loud": False})
        assert bad["error"]["code"] == "invalid"
        trapped = call(host, "wit-calc__boom", {})
        assert trapped["status"] == "error" and trapped["error"]["code"] == "trap"
        assert call(host, "wit-calc__add", {"a": 1, "b": 1})["output"] == {"result": 2}


def test_an_mcp_client_lists_and_calls_the_typed_tools(calc: Host) -> None:
    """Through `wasmext mcp serve`'s server and the official SDK client (in memory)."""
    server = McpToolServer(calc, poll_interval=0)

    async def main() -> None:
        async with Client(server.server, read_timeout_seconds=30) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            add = listed["calc__add"]
            assert add.input_schema["required"] == ["a", "b"]
            assert add.output_schema is not None
            assert add.output_schema["properties"]["result"]["maximum"] == 2**31 - 1
            answered = await client.call_tool("calc__add", {"a": 2, "b": 40})
            assert not answered.is_error and answered.structured_content == {"result": 42}
            shape = await client.call_tool("calc__classify", {"n": 0})
            assert shape.structured_content == {"result": "zero"}
            bad = await client.call_tool("calc__manhattan", {"p": {"x": 1}})
            assert bad.is_error
            assert isinstance(bad.content[0], types.TextContent)
            assert bad.content[0].text.startswith("invalid: invalid arguments")
            trapped = await client.call_tool("calc__boom", {})
            assert trapped.is_error
            assert isinstance(trapped.content[0], types.TextContent)
            assert trapped.content[0].text.startswith("trap: ")

    async def bounded() -> None:
        with anyio.fail_after(60):
            await main()
    anyio.run(bounded)


def _console(doc: Path, heading: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of the console block under `heading`."""
    text = doc.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    block = re.search(r"```console\n(.*?)```", section, flags=re.S)
    assert block is not None
    steps: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


@pytest.mark.slow
def test_the_backends_doc_example_runs_as_written(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"),
                                                        str(ROOT / "cli")])}
    for command, expected in _console(ROOT / "docs" / "backends.md",
                                      "## Tools from a component's WIT exports"):
        argv = shlex.split(command)
        assert argv[0] == "wasmext"
        done = subprocess.run([sys.executable, "-m", "wasmext_cli", *argv[1:]], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        if expected:
            assert done.stdout.splitlines() == expected


def _overreaching() -> str:
    """Functions the host must not offer: a name over 64 characters, a type nested 40
    deep, a record whose schema is over the size cap; and one it offers."""
    nested = "u8"
    for _ in range(40):
        nested = f"(list {nested})"
    fields = " ".join(f'(field "f{i}" u8)' for i in range(1500))
    lift = '(memory (core memory $i "memory")) (realloc (core func $i "realloc"))'
    return f'''
(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024)
    (func (export "one") (result i32) i32.const 1)
    (func (export "p") (param i32) (result i32) i32.const 1)
    (func (export "p2") (param i32 i32) (result i32) i32.const 1))
  (core instance $i (instantiate $m))
  (type $wide (record {fields}))
  (export $w "wide-t" (type $wide))
  (func (export "{"a" * 70}") (result u8) (canon lift (core func $i "one")))
  (func (export "deep") (param "x" {nested}) (result u8) (canon lift (core func $i "p2") {lift}))
  (func (export "wide") (param "x" $w) (result u8) (canon lift (core func $i "p") {lift}))
  (func (export "ok") (result u8) (canon lift (core func $i "one")))
)'''


def test_names_depth_and_schema_size_are_capped() -> None:
    with make_host((bytes(wasmtime.wat2wasm(_overreaching())), {"plugin_id": "over"})) as host:
        assert sorted(n for n in host.tools.tools if n.startswith("over__")) == ["over__ok"]
        lines = [ln.text for ln in host.plugins["over"].plugin.log.lines]
        assert any("is not a WIT identifier of at most 64" in t for t in lines)
        assert any("'deep' is not offered" in t and "deeper than 32" in t for t in lines)
        assert any("'wide' is not offered" in t and "over 65536 bytes" in t for t in lines)
        assert call(host, "over__ok", {})["output"] == {"result": 1}


def test_a_typed_call_runs_under_the_deadline() -> None:
    limits = {"fuel_per_call": 10**12, "timeout_ms": 200}
    with make_host((bytes(wasmtime.wat2wasm(CALC)), {"plugin_id": "slow",
                                                     "limits": limits})) as host:
        plugin = host.plugins["slow"].plugin
        started = time.monotonic()
        with pytest.raises(Timeout, match="200 ms"):
            plugin.call("on_tool", {"name": "spin", "args": {}})
        assert time.monotonic() - started < BOUND_S
        assert call(host, "slow__add", {"a": 1, "b": 2})["output"] == {"result": 3}


def _hybrid() -> str:
    """The world's register/call (one tool `hello`, every call answered "from the world")
    and, beside them, the interface test:calc/ops@1.0.0 with `add` and `hello`."""
    reg = msgpack.packb({"hooks": [{"hook": "on_tool"}],
                         "tools": [{"name": "hello", "description": "From the world"}]})
    resp = msgpack.packb({"ok": True, "value": "from the world"})
    lift = '(memory (core memory $i "memory")) (realloc (core func $i "realloc"))'
    return f'''
(component
  (core module $m
    (memory (export "memory") 1)
    (global $bump (mut i32) (i32.const 8192))
    (data (i32.const 2048) "{wat_bytes(reg)}")
    (data (i32.const 4096) "{wat_bytes(resp)}")
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $bump local.set $p
      global.get $bump local.get 3 i32.add global.set $bump
      local.get $p)
    (func (export "register") (param i32 i32) (result i32)
      (i32.store (i32.const 64) (i32.const 2048))
      (i32.store (i32.const 68) (i32.const {len(reg)}))
      i32.const 64)
    (func (export "call") (param i32 i32) (result i32)
      (i32.store (i32.const 64) (i32.const 4096))
      (i32.store (i32.const 68) (i32.const {len(resp)}))
      i32.const 64)
    (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))
  (core instance $i (instantiate $m))
  (func (export "register") (param "request" (list u8)) (result (list u8))
    (canon lift (core func $i "register") {lift}))
  (func (export "call") (param "request" (list u8)) (result (list u8))
    (canon lift (core func $i "call") {lift}))
  (func $add (param "a" s32) (param "b" s32) (result s32) (canon lift (core func $i "add")))
  (instance $ops (export "add" (func $add)) (export "hello" (func $add)))
  (export "test:calc/ops@1.0.0" (instance $ops))
)'''


def test_a_world_component_adds_its_typed_exports_to_its_own_tools() -> None:
    with make_host((bytes(wasmtime.wat2wasm(_hybrid())), {"plugin_id": "both"})) as host:
        tools = sorted(n for n in host.tools.tools if n.startswith("both__"))
        assert tools == ["both__add", "both__hello"]
        assert host.tools.tools["both__hello"].description == "From the world"
        assert call(host, "both__add", {"a": 2, "b": 3})["output"] == {"result": 5}
        assert call(host, "both__hello", {})["output"] == "from the world"
        lines = [ln.text for ln in host.plugins["both"].plugin.log.lines]
        assert any("registers a tool 'hello' itself" in t for t in lines)


def _flood(count: int) -> str:
    """`flood`: a list<bool> of `count` values read from zeroed memory (one byte each):
    cheap for the guest, millions of values for the host to lift."""
    return f'''
(component
  (core module $m
    (memory (export "memory") 64)
    (func (export "flood") (result i32)
      (i32.store (i32.const 0) (i32.const 64))
      (i32.store (i32.const 4) (i32.const {count}))
      (i32.const 0))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "flood") (result (list bool))
    (canon lift (core func $i "flood") (memory (core memory $i "memory"))
                (realloc (core func $i "realloc")))))'''


def test_lifting_a_flood_of_values_is_the_calls_time_and_output(healthy: Plugin) -> None:
    # A guest returning a million one-byte values made the host lift and convert them
    # for ~8 s past a 300 ms deadline, holding the interpreter lock.
    limits = {"timeout_ms": 300, "max_output_bytes": 100_000}
    with make_host((bytes(wasmtime.wat2wasm(_flood(600_000))),
                    {"plugin_id": "flood", "limits": limits}),
                   (bytes(wasmtime.wat2wasm(_flood(200_000))),
                    {"plugin_id": "wide", "limits": {**limits, "timeout_ms": 10_000}}),
                   (bytes(wasmtime.wat2wasm(CALC)), {"plugin_id": "calc"})) as host:
        started = time.monotonic()
        with pytest.raises(Timeout, match="lifting of its answer ran past 300 ms"):
            host.plugins["flood"].plugin.call("on_tool", {"name": "flood", "args": {}})
        with pytest.raises(InvalidOutput, match="over max_output_bytes 100000"):
            host.plugins["wide"].plugin.call("on_tool", {"name": "flood", "args": {}})
        assert time.monotonic() - started < BOUND_S
        assert call(host, "calc__add", {"a": 1, "b": 2})["output"] == {"result": 3}
    assert healthy.call("test").value == "alive"


def test_converting_the_arguments_is_the_calls_time(healthy: Plugin,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext.sandbox.backends.wit_tools import WitFunction

    arguments = WitFunction.arguments

    def slow(self: WitFunction, args: Any) -> list[Any]:
        # What a huge argument costs the host to check and convert, whatever the machine.
        time.sleep(0.4)
        return arguments(self, args)

    limits = {"fuel_per_call": 10**12, "timeout_ms": 200}
    with make_host((bytes(wasmtime.wat2wasm(CALC)), {"plugin_id": "calc",
                                                     "limits": limits})) as host:
        plugin = host.plugins["calc"].plugin
        monkeypatch.setattr(WitFunction, "arguments", slow)
        started = time.monotonic()
        with pytest.raises(Timeout, match=r"add: converting its arguments ran past 200 ms"
                           ) as late:
            plugin.call("on_tool", {"name": "add", "args": {"a": 1, "b": 2}})
        assert late.value.plugin_id == "calc" and "calc" in late.value.describe()
        assert time.monotonic() - started < BOUND_S
        monkeypatch.setattr(WitFunction, "arguments", arguments)
        assert call(host, "calc__add", {"a": 1, "b": 2})["output"] == {"result": 3}
    assert healthy.call("test").value == "alive"
