"""003's `output_schema`: an output extension declares the shape of its results, each
result is validated against it (jsonschema-rs), a result that does not match fails
without its content, and a schema that cannot work is a load error naming the field."""

from __future__ import annotations

import time
from typing import Any

import pytest
import wasmtime

from wasmext import Host, LoadError, Runtime
from wasmext.config import HostConfig
from wasmext.services.tools import MAX_SCHEMA_DEPTH
from wasmext.testing import guest_wat

SCHEMA = {"type": "object", "required": ["result", "confidence"],
          "properties": {"result": {"type": "string"},
                         "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
          "additionalProperties": False}

DEEP: dict[str, Any] = {"type": "array"}
for _ in range(MAX_SCHEMA_DEPTH):
    DEEP = {"type": "array", "items": DEEP}


def shaped(name: str, answer: Any, schema: Any = SCHEMA) -> bytes:
    """An output extension `name` that answers `answer`, declaring `schema`."""
    registration = {"hooks": [{"hook": "output_extension", "pattern": name}],
                    "output_extensions": [{"name": name, "output_schema": schema}]}
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": answer},
                                             registration=registration)))


def new_host() -> Host:
    return Host(HostConfig(state_backend="memory"), runtime=Runtime(cache=False),
                plugin_dirs=[])


def test_results_are_checked_against_the_declared_schema() -> None:
    with new_host() as host:
        host.add(shaped("good", {"result": "yes", "confidence": 0.9}), plugin_id="good")
        host.add(shaped("bad", {"result": "yes", "confidence": 7, "leak": "x" * 50}),
                 plugin_id="bad")
        with host.session("s1") as s:
            _, (good, bad) = s.output_extensions("#good #bad", "an answer")
            _, (again,) = s.output_extensions("#good", "still serving")
    assert good.success and good.content == {"result": "yes", "confidence": 0.9}
    assert good.metadata["output_schema"] == "valid"
    assert not bad.success and bad.content is None
    assert bad.error is not None and "does not match its output_schema" in bad.error
    assert bad.metadata["output_schema"] == "invalid" and bad.plugin_id == "bad"
    assert again.success  # the host keeps serving


@pytest.mark.parametrize(("schema", "says"), [
    ({"type": "object", "minLength": "x"}, "invalid JSON Schema"),
    ({"type": "string", "pattern": "(a)\\1"}, "invalid JSON Schema"),
    ("not a schema", "must be a JSON Schema object"),
    (DEEP, "max_schema_depth"),
])
def test_a_schema_that_cannot_work_is_a_load_error_naming_the_field(schema: Any,
                                                                    says: str) -> None:
    with new_host() as host:
        start = time.monotonic()
        with pytest.raises(LoadError) as info:
            host.add(shaped("broken", {"result": "x"}, schema), plugin_id="broken")
        assert time.monotonic() - start < 5
        assert "output_extensions[0].output_schema" in info.value.message
        assert says in info.value.message
        assert "broken" not in host.plugins
        host.add(shaped("good", {"result": "yes", "confidence": 1}), plugin_id="good")
        with host.session("s1") as s:
            assert s.output_extensions("#good", "a")[1][0].success
