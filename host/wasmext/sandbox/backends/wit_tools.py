"""Tools from a component's typed WIT exports: JSON Schemas from WIT types, and JSON
arguments to WIT values and back.

A component's exported functions of typed parameters, directly or in a WIT
interface (`ns:pkg/iface@version`), are its tools (Wassette's model): all of
them for a component without the world `wasmext:plugin@1.0.0` (no `register`
and `call`), added to its registered tools for one with it. Each function
becomes the tool `<plugin>__<function>` (the interface's name joins when two
interfaces export the same function name):

    WIT                     JSON (the derived schema says exactly this)
    bool, string            boolean, string
    s8 ... u64              integer within the type's range
    f32, f64                number (a non-finite answer is null)
    char                    a string of one code point
    list<T>                 array of T (list<u8> too: integers 0-255)
    tuple<A, B>             array [A, B]
    record {a: A}           object {"a": A}, every field required, no other
    variant {c(T), d}       {"c": T} or "d"
    enum {x, y}             "x" or "y"
    flags {r, w}            array of unique names
    option<T>               T or null (absent parameter = none)
    result<T, E>            {"ok": T} or {"err": E}; a function's own result
                            answers T, and its `err` is the tool's error

A lifted answer is hostile too: a list of millions of one-byte values costs the
host seconds to lift and convert, so `answer_floor` tells an oversized answer
from its list lengths alone (no walk of a list of scalars, no conversion), and a
list of scalars converts in one step.

Resources, streams, futures and error contexts have no JSON form: a function
using one is not offered (the load log says so). The component is hostile: a
type walk is bounded in nodes and depth (a type graph can share nodes and
expand exponentially), names are checked, a schema is capped in bytes and the
functions in number. Arguments are checked against the type as they are
converted (the registry has already checked them against the schema; a direct
hook call has not), so no value the type does not allow reaches the guest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import wasmtime
from wasmtime import component as wc

from wasmext.errors import WitTypeRefused as ToolRefused
from wasmext.errors import WitValueRefused as ValueRefused

__all__ = ["MAX_FUNCTIONS", "MAX_SCHEMA_BYTES", "MAX_TYPE_DEPTH", "MAX_TYPE_NODES",
           "WitFunction", "answer_floor", "from_wit", "schema_of",
           "to_wit", "typed_functions"]

MAX_FUNCTIONS = 128
MAX_TYPE_NODES = 2048  # per function, counted over the expanded type tree
MAX_TYPE_DEPTH = 32
MAX_SCHEMA_BYTES = 64 * 1024
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")  # a WIT identifier that is a tool name too
_INTERFACE = re.compile(r"^[a-z][a-z0-9-]*:[a-z][a-z0-9-]*/([a-z][a-z0-9-]*)(@[0-9A-Za-z.+-]+)?$")
_WORLD_EXPORTS = frozenset({"register", "call"})

_INTS: dict[type, tuple[int, int]] = {
    wc.S8: (-(1 << 7), (1 << 7) - 1), wc.S16: (-(1 << 15), (1 << 15) - 1),
    wc.S32: (-(1 << 31), (1 << 31) - 1), wc.S64: (-(1 << 63), (1 << 63) - 1),
    wc.U8: (0, (1 << 8) - 1), wc.U16: (0, (1 << 16) - 1), wc.U32: (0, (1 << 32) - 1),
    wc.U64: (0, (1 << 64) - 1),
}


# -- type -> JSON Schema --------------------------------------------------------------


class _Walk:
    """A bounded walk over one function's types."""

    def __init__(self) -> None:
        self.nodes = 0

    def enter(self, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_TYPE_NODES:
            raise ToolRefused(f"its types have more than {MAX_TYPE_NODES} parts")
        if depth > MAX_TYPE_DEPTH:
            raise ToolRefused(f"its types nest deeper than {MAX_TYPE_DEPTH}")


def _check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise ToolRefused(f"{what} {name[:64]!r} is not a WIT identifier of at most 64 "
                          "characters")
    return name


def _cases(ty: Any) -> list[tuple[str, Any]]:
    """The cases of a variant-like type, as wasmtime-py orders them."""
    if isinstance(ty, wc.OptionType):
        return [("none", None), ("some", ty.payload)]
    if isinstance(ty, wc.ResultType):
        return [("ok", ty.ok), ("err", ty.err)]
    return list(ty.cases)


def schema_of(ty: Any, *, output: bool = False, walk: _Walk | None = None,
              depth: int = 0) -> dict[str, Any]:
    """The JSON Schema of a WIT value type (`output`: what the host answers with)."""
    walk = walk or _Walk()
    walk.enter(depth)
    d = depth + 1
    if isinstance(ty, wc.Bool):
        return {"type": "boolean"}
    if type(ty) in _INTS:
        low, high = _INTS[type(ty)]
        return {"type": "integer", "minimum": low, "maximum": high}
    if isinstance(ty, (wc.F32, wc.F64)):
        return {"type": ["number", "null"]} if output else {"type": "number"}
    if isinstance(ty, wc.Char):
        return {"type": "string", "minLength": 1, "maxLength": 1}
    if isinstance(ty, wc.String):
        return {"type": "string"}
    if isinstance(ty, wc.ListType):
        return {"type": "array", "items": schema_of(ty.element, output=output, walk=walk,
                                                     depth=d)}
    if isinstance(ty, wc.TupleType):
        items = [schema_of(t, output=output, walk=walk, depth=d) for t in ty.elements]
        return {"type": "array", "prefixItems": items, "minItems": len(items),
                "maxItems": len(items)}
    if isinstance(ty, wc.RecordType):
        fields = ty.fields
        props = {_check_name(name, "record field"): schema_of(t, output=output, walk=walk,
                                                                depth=d)
                 for name, t in fields}
        return {"type": "object", "properties": props, "required": [n for n, _ in fields],
                "additionalProperties": False}
    if isinstance(ty, wc.EnumType):
        return {"type": "string", "enum": [_check_name(n, "enum case") for n in ty.names]}
    if isinstance(ty, wc.FlagsType):
        return {"type": "array", "items": {"enum": [_check_name(n, "flag") for n in ty.names]},
                "uniqueItems": True}
    if isinstance(ty, wc.OptionType):
        inner = schema_of(ty.payload, output=output, walk=walk, depth=d)
        if isinstance(ty.payload, wc.OptionType):  # null alone could not tell the levels
            inner = _single("some", inner)
        return {"anyOf": [{"type": "null"}, inner]}
    if isinstance(ty, (wc.ResultType, wc.VariantType)):
        choices: list[dict[str, Any]] = []
        for name, payload in _cases(ty):
            _check_name(name, "case")
            if isinstance(ty, wc.ResultType):  # {"ok": null} keeps the shape of the others
                sub = {"type": "null"} if payload is None else \
                    schema_of(payload, output=output, walk=walk, depth=d)
                choices.append(_single(name, sub))
            elif payload is None:
                choices.append({"const": name})
            else:
                choices.append(_single(name, schema_of(payload, output=output, walk=walk,
                                                       depth=d)))
        return {"oneOf": choices}
    raise ToolRefused(f"a {type(ty).__name__.removesuffix('Type').lower()} has no JSON form")


def _single(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: schema}, "required": [key],
            "additionalProperties": False}


# -- JSON -> WIT value -----------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueRefused(f"{where}: expected a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no WIT string holds it
        raise ValueRefused(f"{where}: not valid Unicode text") from None
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueRefused(f"{where}: expected an object")
    return value


def _one_key(value: Any, names: list[str], where: str) -> tuple[str, Any]:
    obj = _object(value, where)
    if len(obj) != 1 or next(iter(obj)) not in names:
        raise ValueRefused(f"{where}: expected an object with one key of {', '.join(names)}")
    key = next(iter(obj))
    return key, obj[key]


def to_wit(ty: Any, value: Any, where: str = "arguments") -> Any:
    """The wasmtime-py value of JSON `value` for WIT type `ty` (ValueRefused if it does
    not fit)."""
    if isinstance(ty, wc.Bool):
        if not isinstance(value, bool):
            raise ValueRefused(f"{where}: expected true or false")
        return value
    if type(ty) in _INTS:
        low, high = _INTS[type(ty)]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueRefused(f"{where}: expected an integer from {low} to {high}")
        return value
    if isinstance(ty, (wc.F32, wc.F64)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueRefused(f"{where}: expected a finite number")
        return float(value)
    if isinstance(ty, wc.Char):
        text = _text(value, where)
        if len(text) != 1:
            raise ValueRefused(f"{where}: expected one character")
        return text
    if isinstance(ty, wc.String):
        return _text(value, where)
    if isinstance(ty, wc.ListType):
        if not isinstance(value, list):
            raise ValueRefused(f"{where}: expected an array")
        element = ty.element
        items = [to_wit(element, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return bytes(items) if isinstance(element, wc.U8) else items
    if isinstance(ty, wc.TupleType):
        elements = ty.elements
        if not isinstance(value, list) or len(value) != len(elements):
            raise ValueRefused(f"{where}: expected an array of {len(elements)}")
        return tuple(to_wit(t, v, f"{where}[{i}]")
                     for i, (t, v) in enumerate(zip(elements, value, strict=True)))
    if isinstance(ty, wc.RecordType):
        obj = _object(value, where)
        fields = ty.fields
        extra = set(obj) - {n for n, _ in fields}
        if extra:
            raise ValueRefused(f"{where}: unknown field {sorted(extra)[0][:64]!r}")
        record = wc.Record()
        for name, t in fields:
            if name not in obj:
                raise ValueRefused(f"{where}: missing field {name!r}")
            setattr(record, name, to_wit(t, obj[name], f"{where}.{name}"))
        return record
    if isinstance(ty, wc.EnumType):
        if value not in ty.names:
            raise ValueRefused(f"{where}: expected one of {', '.join(ty.names)}")
        return value
    if isinstance(ty, wc.FlagsType):
        names = ty.names
        if not isinstance(value, list) or any(v not in names for v in value) \
                or len(set(value)) != len(value):
            raise ValueRefused(f"{where}: expected distinct names of {', '.join(names)}")
        return set(value)
    if isinstance(ty, wc.OptionType):
        if value is None:
            return _lower_case(ty, "none", None)
        if isinstance(ty.payload, wc.OptionType):
            _, value = _one_key(value, ["some"], where)
        return _lower_case(ty, "some", to_wit(ty.payload, value, where))
    if isinstance(ty, (wc.ResultType, wc.VariantType)):
        cases = _cases(ty)
        names = [n for n, _ in cases]
        if isinstance(value, str) and isinstance(ty, wc.VariantType):
            payload_of = dict(cases)
            if value not in payload_of or payload_of[value] is not None:
                raise ValueRefused(f"{where}: {value[:64]!r} is not a case without a value")
            return _lower_case(ty, value, None)
        tag, raw = _one_key(value, names, where)
        payload = dict(cases)[tag]
        if payload is None:
            if raw is not None:
                raise ValueRefused(f"{where}.{tag}: this case carries no value")
            return _lower_case(ty, tag, None)
        return _lower_case(ty, tag, to_wit(payload, raw, f"{where}.{tag}"))
    raise ValueRefused(f"{where}: a {type(ty).__name__} has no JSON form")


def _lower_case(ty: Any, tag: str, payload: Any) -> Any:
    """wasmtime-py names a case by a Variant only when the payloads' Python types overlap."""
    if ty._tagged():
        return wc.Variant(tag, payload)
    return payload


# -- WIT value -> JSON -------------------------------------------------------------------


def _classes(ty: Any) -> tuple[type, ...]:
    found: set[type] = set()
    ty.add_classes(found)
    return tuple(found)


def _lifted_case(ty: Any, value: Any) -> tuple[str, Any, Any]:
    """(case name, its payload type, the payload) of a lifted variant-like value."""
    cases = _cases(ty)
    if ty._tagged():
        if not isinstance(value, wc.Variant):
            raise ValueRefused("a variant answer without its case")
        for name, payload in cases:
            if name == value.tag:
                return name, payload, value.payload
        raise ValueRefused("a variant answer of an unknown case")
    for name, payload in cases:
        if payload is None:
            if value is None:
                return name, None, None
        elif isinstance(value, _classes(payload)):
            return name, payload, value
    raise ValueRefused("a variant answer that fits none of its cases")


_SCALAR_VALUES = (bool, int, float, str, bytes, bytearray, type(None))


def answer_floor(value: Any, cap: int) -> int:
    """A lower bound of the bytes a lifted value takes encoded (each value at least
    one), counted only until it passes `cap`: a list of scalars counts by its length."""
    total, stack = 0, [value]
    while stack and total <= cap:
        item = stack.pop()
        total += 1
        if isinstance(item, (str, bytes, bytearray)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            items = list(item) if isinstance(item, (set, frozenset)) else item
            # A WIT list holds one type (a first scalar: all are); a tuple is short, mixed.
            if isinstance(item, tuple) or (items and not isinstance(items[0], _SCALAR_VALUES)):
                stack.extend(items)
        elif isinstance(item, wc.Variant):
            stack.append(item.payload)
        elif isinstance(item, wc.Record):
            stack.extend(vars(item).values())
    return total


def _scalar(ty: Any) -> bool:
    return isinstance(ty, (wc.Bool, wc.Char, wc.String, wc.EnumType)) or type(ty) in _INTS


def from_wit(ty: Any, value: Any) -> Any:
    """The JSON form of a lifted WIT value (as `schema_of(ty, output=True)` says)."""
    if isinstance(ty, (wc.F32, wc.F64)):
        return value if isinstance(value, float) and math.isfinite(value) else None
    if _scalar(ty):
        return value
    if isinstance(ty, wc.ListType):
        if isinstance(value, (bytes, bytearray)) or _scalar(ty.element):
            return list(value)
        return [from_wit(ty.element, v) for v in value]
    if isinstance(ty, wc.TupleType):
        return [from_wit(t, v) for t, v in zip(ty.elements, value, strict=True)]
    if isinstance(ty, wc.RecordType):
        return {name: from_wit(t, getattr(value, name)) for name, t in ty.fields}
    if isinstance(ty, wc.FlagsType):
        return sorted(value)
    if isinstance(ty, wc.OptionType):
        name, payload, inner = _lifted_case(ty, value)
        if name == "none":
            return None
        out = from_wit(payload, inner)
        return {"some": out} if isinstance(ty.payload, wc.OptionType) else out
    if isinstance(ty, (wc.ResultType, wc.VariantType)):
        name, payload, inner = _lifted_case(ty, value)
        if payload is None:
            return {name: None} if isinstance(ty, wc.ResultType) else name
        return {name: from_wit(payload, inner)}
    raise ValueRefused(f"a {type(ty).__name__} has no JSON form")


# -- a component's functions -------------------------------------------------------------


@dataclass(frozen=True)
class WitFunction:
    """One exported typed function offered as a tool."""

    tool: str  # the short tool name (the registry prefixes the plugin id)
    interface: str | None  # the exported interface's name, None for a world-level function
    function: str
    params: tuple[tuple[str, Any], ...]
    result: Any  # a ValType or None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]

    def registration(self) -> dict[str, Any]:
        """Its entry of the registration map's "tools"."""
        where = f"of the WIT interface {self.interface}" if self.interface else "of the component"
        return {"name": self.tool, "description": f"The function {self.function} {where}.",
                "input_schema": self.input_schema, "output_schema": self.output_schema}

    def arguments(self, args: Any) -> list[Any]:
        """The call's parameters from a JSON object (absent option parameters are none)."""
        obj = _object(args, "arguments")
        extra = set(obj) - {n for n, _ in self.params}
        if extra:
            raise ValueRefused(f"arguments: unknown parameter {sorted(extra)[0][:64]!r}")
        out = []
        for name, ty in self.params:
            if name not in obj and not isinstance(ty, wc.OptionType):
                raise ValueRefused(f"arguments: missing parameter {name!r}")
            out.append(to_wit(ty, obj.get(name), name))
        return out

    def answer(self, value: Any) -> tuple[bool, Any]:
        """(ok, JSON) of a lifted result: a result type's `err` is (False, its JSON)."""
        if self.result is None:
            return True, {"result": None}
        if isinstance(self.result, wc.ResultType):
            name, payload, inner = _lifted_case(self.result, value)
            out = None if payload is None else from_wit(payload, inner)
            return (True, {"result": out}) if name == "ok" else (False, out)
        return True, {"result": from_wit(self.result, value)}


def _function(tool: str, interface: str | None, name: str, fty: Any) -> WitFunction:
    walk = _Walk()
    params = tuple((_check_name(n, "parameter"), t) for n, t in fty.params)
    props = {n: schema_of(t, walk=walk) for n, t in params}
    required = [n for n, t in params if not isinstance(t, wc.OptionType)]
    input_schema: dict[str, Any] = {"type": "object", "properties": props,
                                    "additionalProperties": False}
    if required:
        input_schema["required"] = required
    result = fty.result
    if result is None:
        out: dict[str, Any] = {"type": "null"}
    elif isinstance(result, wc.ResultType):  # the answer is the ok payload
        out = {"type": "null"} if result.ok is None else \
            schema_of(result.ok, output=True, walk=walk)
        if result.err is not None:
            schema_of(result.err, output=True, walk=walk)  # it must have a JSON form too
    else:
        out = schema_of(result, output=True, walk=walk)
    output_schema = {"type": "object", "properties": {"result": out}, "required": ["result"]}
    for schema in (input_schema, output_schema):
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            raise ToolRefused(f"its JSON Schema is over {MAX_SCHEMA_BYTES} bytes")
    return WitFunction(tool, interface, name, params, result, input_schema, output_schema)


def typed_functions(component_type: Any, engine: wasmtime.Engine,
                    warn: Callable[[str], None]) -> list[WitFunction]:
    """The exported functions that can be tools; `warn` hears of each one left out."""
    found: list[tuple[str | None, str, Any]] = []
    for name, extern in component_type.exports(engine).items():
        item = extern.ty
        if isinstance(item, wc.FuncType) and name not in _WORLD_EXPORTS:
            found.append((None, name, item))
        elif isinstance(item, wc.ComponentInstanceType) and _INTERFACE.match(name) \
                and not name.startswith("wasi:"):
            for fname, fextern in item.exports(engine).items():
                fty = fextern.ty
                if isinstance(fty, wc.FuncType):
                    found.append((name, fname, fty))
        if len(found) > MAX_FUNCTIONS:
            warn(f"only the first {MAX_FUNCTIONS} exported functions are offered")
            found = found[:MAX_FUNCTIONS]
            break
    counts: dict[str, int] = {}
    for _, fname, _ in found:
        counts[fname] = counts.get(fname, 0) + 1
    out: list[WitFunction] = []
    for interface, fname, fty in found:
        short = fname
        if counts[fname] > 1 and interface is not None:
            match = _INTERFACE.match(interface)
            short = f"{match.group(1) if match else 'x'}_{fname}"
        try:
            _check_name(fname, "function")
            if len(short) > 64:
                raise ToolRefused("its tool name is over 64 characters")
            out.append(_function(short, interface, fname, fty))
        except ToolRefused as why:
            warn(f"the function {fname[:64]!r} is not offered as a tool: {why}")
    return out
