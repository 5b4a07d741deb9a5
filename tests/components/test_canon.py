"""`list<u8>` across the component boundary (sandbox/backends/canon.py), against a
tiny component whose `call` answers its request's bytes unchanged."""

from __future__ import annotations

import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st
from wasmtime import component as wc

from wasmext.sandbox.backends.canon import IMAGE_MAX, BytesExport

# `call` hands back the list it was given: the canonical ABI copied it into the
# component's memory, and copies it out again.
ECHO = r'''
(component
  (core module $m
    (memory (export "memory") 4)
    (global $bump (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $bump local.set $p
      global.get $bump local.get 3 i32.add global.set $bump
      local.get $p)
    (func (export "call") (param i32 i32) (result i32)
      (i32.store (i32.const 8) (local.get 0))
      (i32.store (i32.const 12) (local.get 1))
      (global.set $bump (i32.const 1024))
      i32.const 8))
  (core instance $i (instantiate $m))
  (func (export "call") (param "request" (list u8)) (result (list u8))
    (canon lift (core func $i "call") (memory (core memory $i "memory"))
      (realloc (core func $i "realloc"))))
)
'''

# The same component whose `call` traps (a guest failing mid-call).
TRAPS = ECHO.replace("(i32.store (i32.const 8) (local.get 0))",
                     "unreachable (i32.store (i32.const 8) (local.get 0))")

_ENGINE = wasmtime.Engine()
_COMPONENT = wc.Component(_ENGINE, ECHO)
_TRAPPING = wc.Component(_ENGINE, TRAPS)


def _echo_export(component: wc.Component = _COMPONENT) -> BytesExport:
    store = wasmtime.Store(_ENGINE)
    instance = wc.Linker(_ENGINE).instantiate(store, component)
    return BytesExport(instance, store, "call")


def test_requests_of_every_size_cross_unchanged() -> None:
    """Empty, short, at and past the reused image's size, and long requests come back
    byte for byte, in any order of sizes (a short request after a long one leaves no
    bytes of the long one behind)."""
    call = _echo_export()
    sizes = [0, 1, 2, 130, IMAGE_MAX - 1, IMAGE_MAX, IMAGE_MAX + 1, 40_000, 3, 0, IMAGE_MAX]
    for i, n in enumerate(sizes):
        data = bytes((i + k * 7) & 0xFF for k in range(n))
        assert call(data, 1 << 20) == data, n


def test_an_answer_over_the_limit_is_dropped() -> None:
    call = _echo_export()
    assert call(b"x" * 100, 99) is None
    assert call(b"x" * 100, 100) == b"x" * 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=IMAGE_MAX + 64), min_size=1, max_size=4))
def test_any_bytes_cross_unchanged(requests: list[bytes]) -> None:
    call = _echo_export()
    for data in requests:
        assert call(data, 1 << 20) == data


def test_a_trapping_call_raises_and_releases_the_export() -> None:
    """A call whose guest traps raises wasmtime's error and leaves the export's kept
    values free (a bool in each slot); a later call on that poisoned instance gets
    wasmtime's refusal as an error, not a crash."""
    bool_kind = wasmtime._ffi.WASMTIME_COMPONENT_BOOL.value
    for n in (1, 130, IMAGE_MAX, IMAGE_MAX + 5):
        call = _echo_export(_TRAPPING)
        with pytest.raises(wasmtime.WasmtimeError, match="unreachable"):
            call(b"x" * n, 1 << 20)
        assert not call._busy
        assert (call._arg.kind, call._result.kind) == (bool_kind, bool_kind)
        with pytest.raises(wasmtime.WasmtimeError, match="cannot enter"):
            call(b"after", 1 << 20)


def test_a_call_finding_the_values_in_use_takes_fresh_ones() -> None:
    """Re-entered (the export's own values still in use: wasmtime refuses re-entering
    an instance, but the values must not be shared whatever it does), a call goes
    through values of its own and answers the same bytes."""
    call = _echo_export()
    call._busy = True
    assert call(b"fresh", 1 << 20) == b"fresh"
    assert call(b"x" * 200, 100) is None
    call._busy = False
    assert call(b"reused", 1 << 20) == b"reused"


def test_the_kept_values_hold_nothing_to_free_between_calls() -> None:
    """wasmtime assigns a call's result over what its slot holds (dropping it): after
    each call, answered, refused over the limit or trapped, the export's kept argument
    and result slots hold a bool, never a list already freed (a double free)."""
    call = _echo_export()
    bool_kind = wasmtime._ffi.WASMTIME_COMPONENT_BOOL.value
    for data, limit in ((b"a" * 130, 1 << 20), (b"b" * 10, 5), (b"c", 1 << 20)):
        call(data, limit)
        assert (call._arg.kind, call._result.kind) == (bool_kind, bool_kind)
    for _ in range(2_000):  # many answers through the same slots
        assert call(b"d" * 64, 1 << 20) == b"d" * 64
