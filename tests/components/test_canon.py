"""`list<u8>` across the component boundary (sandbox/backends/canon.py), against a
tiny component whose `call` answers its request's bytes unchanged."""

from __future__ import annotations

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

_ENGINE = wasmtime.Engine()
_COMPONENT = wc.Component(_ENGINE, ECHO)


def _echo_export() -> BytesExport:
    store = wasmtime.Store(_ENGINE)
    instance = wc.Linker(_ENGINE).instantiate(store, _COMPONENT)
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
