"""Copies of a plugin that declare the same tool share its compiled schema, not its state."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import ConfigError
from wasmext.services.schema_cache import shared_validator
from wasmext.services.tools import compile_schema
from wasmext.testing import guest_wat, make_host

SCHEMA = {"type": "object", "required": ["city"], "additionalProperties": False,
          "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]+$"}}}


def tool_guest(schema: dict[str, Any], value: str) -> str:
    return guest_wat(registration={"hooks": [{"hook": "on_tool"}],
                                   "tools": [{"name": "weather", "input_schema": schema}]},
                     response={"ok": True, "value": value})


def test_copies_share_the_validator_but_not_instances() -> None:
    wat = tool_guest(SCHEMA, "sunny")
    other = {**SCHEMA, "required": []}
    with make_host((wat, {"plugin_id": "copy-a"}), (wat, {"plugin_id": "copy-b"}),
                   (tool_guest(other, "rain"), {"plugin_id": "other"})) as host:
        a, b = host.tools.tools["copy-a__weather"], host.tools.tools["copy-b__weather"]
        assert a.validator is b.validator
        assert host.tools.tools["other__weather"].validator is not a.validator
        pa, pb = host.plugins["copy-a"].plugin, host.plugins["copy-b"].plugin
        ia, ib = pa._borrow(), pb._borrow()
        assert ia.store is not ib.store and ia.ctx is not ib.ctx
        pa._release(ia)
        pb._release(ib)
        for name in ("copy-a__weather", "copy-b__weather"):
            assert host.tools.call(name, {"city": "Lisbon"})["status"] == "ok"
            refused = host.tools.execute(name, {"city": "L1sbon"})
            assert refused["error"]["code"] == "invalid"
        assert host.tools.execute("other__weather", {})["status"] == "ok"


def test_a_schema_json_would_rewrite_is_compiled_on_its_own() -> None:
    built: list[Any] = []

    def build() -> object:
        built.append(object())
        return built[-1]

    plain = {"type": "object", "properties": {"1": {"type": "string"}}}
    int_key = {"type": "object", "properties": {1: {"type": "string"}}}
    first = shared_validator(plain, build)
    assert shared_validator(plain, build) is first
    assert shared_validator(int_key, build) is not first
    assert shared_validator({"enum": ("a",)}, build) is not shared_validator({"enum": ["a"]},
                                                                              build)
    assert shared_validator({"const": 1}, build) is not shared_validator({"const": True}, build)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    | st.floats(allow_nan=False), lambda c: st.lists(c, max_size=3)
    | st.dictionaries(st.text(max_size=5) | st.integers(), c, max_size=3), max_leaves=8)


@given(json_values, json_values)
def test_shared_only_between_equal_schemas(one: Any, two: Any) -> None:
    a = shared_validator({"const": one}, object)
    b = shared_validator({"const": two}, object)
    if a is b:
        assert {"const": one} == {"const": two}


def test_a_bad_schema_is_refused_each_time() -> None:
    backref = {"type": "object", "properties": {"s": {"pattern": "(a)\\1"}}}
    for _ in range(2):  # a failure is never kept
        with pytest.raises(ConfigError, match="invalid JSON Schema"):
            compile_schema(backref, "tool t")
