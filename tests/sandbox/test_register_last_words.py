"""A registration that answers nothing carries what the plugin logged as it failed: the Go
SDK of a plugin that never called `wasmext.Register` logs how to fix it, and the load
error said only `wasmext_register returned nothing`."""

from __future__ import annotations

import time

import pytest

from wasmext import InvalidOutput, Runtime
from wasmext.testing import guest_wat, load_wat, wat_bytes

LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'
SAID = b"wasmext: no plugin registered; call wasmext.Register from an init function"


def _silent_register(said: bytes, level: int = 4) -> str:
    """A guest whose wasmext_register logs `said` at `level` and answers 0 (nothing)."""
    return f"""(module
  {LOG}
  (memory (export "memory") 1)
  (data (i32.const 1024) "{wat_bytes(said)}")
  (func (export "wasmext_abi_version") (result i32) (i32.const 1))
  (func (export "wasmext_alloc") (param i32) (result i32) (i32.const 8192))
  (func (export "wasmext_register") (param i32 i32) (result i64)
    (call $log (i32.const {level}) (i32.const 1024) (i32.const {len(said)}))
    (i64.const 0))
  (func (export "wasmext_call") (param i32 i32) (result i64) (i64.const 0)))"""


def test_the_plugins_error_line_is_in_the_load_error() -> None:
    with Runtime(cache=False) as runtime:
        with pytest.raises(InvalidOutput) as caught:
            load_wat(runtime, _silent_register(SAID), plugin_id="hello-go")
        assert caught.value.describe() == (
            "plugin hello-go hook register: invalid output: wasmext_register returned "
            f"nothing; the plugin logged: {SAID.decode()}")


def test_a_hostile_last_word_is_one_bounded_inert_line() -> None:
    said = b"\x1b[2J\x1b]0;owned\x07" + b"x" * 60_000 + b"\nsecond line"
    with Runtime(cache=False) as runtime:
        started = time.monotonic()
        with pytest.raises(InvalidOutput) as caught:
            load_wat(runtime, _silent_register(said), plugin_id="hostile")
        assert time.monotonic() - started < 10
        line = caught.value.describe()
        assert "\x1b" not in line and "\x07" not in line and "\n" not in line
        assert len(line) < 2_000 and "the plugin logged: " in line
        healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}))
        assert healthy.call("test").value == "alive"


def test_an_info_line_is_not_taken_for_the_cause() -> None:
    with Runtime(cache=False) as runtime:
        with pytest.raises(InvalidOutput) as caught:
            load_wat(runtime, _silent_register(b"starting up", level=2), plugin_id="quiet")
        assert str(caught.value) == "wasmext_register returned nothing"
