"""Copies of a module whose guest declares its registration shareable reuse it.

The promise is checked, not trusted: a copy's first instance registers again,
and a different map is an InvalidOutput fault that names the copy."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
import pytest
import wasmtime

from support import Built
from wasmext import InvalidOutput, Runtime
from wasmext._abi import ABI_MAJOR, ABI_MINOR
from wasmext._version import __version__
from wasmext.testing import REGISTER_AT, RESPONSE_AT, guest_wat, packed, wat_bytes

ROOT = Path(__file__).resolve().parents[2]
REG = {"hooks": [{"hook": "test"}], "name": "same", "shareable": True}
LIAR_REG = {"hooks": [{"hook": "test"}, {"hook": "on_plain_text"}], "name": "other",
            "shareable": True}
LIAR_AT = RESPONSE_AT + 1024


def _wasm(registration: dict[str, object]) -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(registration=registration)))


def _request_len(plugin_id: str) -> int:
    return len(msgpack.packb({"abi": {"major": ABI_MAJOR, "minor": ABI_MINOR},
                              "host": {"name": "wasmext", "version": __version__},
                              "plugin": {"id": plugin_id}, "settings": {}}))


def _liar() -> bytes:
    """Declares shareable, but a longer plugin id gets another map (the id leaks in)."""
    wat = guest_wat(registration=REG)
    honest = msgpack.packb(REG)
    other = msgpack.packb(LIAR_REG)
    start = wat.index('(func (export "wasmext_register")')
    end = wat.index('(func (export "wasmext_call")')
    body = f"""(func (export "wasmext_register") (param $p i32) (param $l i32) (result i64)
    (if (result i64) (i32.gt_u (local.get $l) (i32.const {_request_len("a")}))
      (then (i64.const {packed(LIAR_AT, len(other))}))
      (else (i64.const {packed(REGISTER_AT, len(honest))}))))
  (data (i32.const {LIAR_AT}) "{wat_bytes(other)}")
  """
    return bytes(wasmtime.wat2wasm(wat[:start] + body + wat[end:]))


def test_a_copy_reuses_the_map_and_starts_at_its_first_call() -> None:
    wasm = _wasm(REG)
    with Runtime(cache=False) as rt:
        first = rt.load(wasm, plugin_id="first")
        copy = rt.load(wasm, plugin_id="copy")
        assert first.registration.shareable and len(first._idle) == 1
        assert len(copy._idle) == 0  # nothing started yet
        assert copy.registration.hook_names == ("test",) and copy.registration.name == "same"
        assert copy.call("test", None).value == "ok"
        assert len(copy._idle) == 1


def test_without_the_promise_every_copy_registers_at_load() -> None:
    wasm = _wasm({"hooks": [{"hook": "test"}]})
    with Runtime(cache=False) as rt:
        rt.load(wasm, plugin_id="first")
        assert len(rt.load(wasm, plugin_id="copy")._idle) == 1


def test_other_settings_or_grants_register_again() -> None:
    wasm = _wasm(REG)
    with Runtime(cache=False) as rt:
        rt.load(wasm, plugin_id="first")
        assert len(rt.load(wasm, plugin_id="s", settings={"x": 1})._idle) == 1
        assert len(rt.load(wasm, plugin_id="g", grants={"lookup"})._idle) == 1


def test_a_broken_promise_is_an_invalid_output_fault_naming_the_copy() -> None:
    wasm = _liar()
    with Runtime(cache=False) as rt:
        honest = rt.load(wasm, plugin_id="a")
        liar = rt.load(wasm, plugin_id="a-much-longer-plugin-id")
        assert liar.registration.hook_names == ("test",)  # the shared map, for now
        started = time.monotonic()
        with pytest.raises(InvalidOutput, match="declared shareable") as err:
            liar.call("test", None)
        assert time.monotonic() - started < 5
        assert err.value.plugin_id == "a-much-longer-plugin-id"
        assert liar.faults == 1 and len(liar._idle) == 0
        assert honest.call("test", None).value == "ok"  # the first copy is healthy


def test_shareable_must_be_a_boolean() -> None:
    with Runtime(cache=False) as rt, pytest.raises(InvalidOutput, match="'shareable'"):
        rt.load(_wasm({"hooks": [], "shareable": 1}), plugin_id="bad")


def test_the_c_sdk_declares_its_static_table_shareable(built: Built) -> None:
    folder = built["pii-mask"]
    with Runtime(cache=False) as rt:
        a = rt.load(folder, plugin_id="mask-a")
        b = rt.load(folder, plugin_id="mask-b")
        assert a.registration.shareable and b.registration == a.registration
        assert b.call("on_plain_text", "mail a@b.example").value == "mail [EMAIL]"
