"""Hostile answer regions at the edge of memory (ABI minor 3; red team).

The host writes an answer into the guest's declared area only when the whole answer
lies inside memory: an area ending exactly at the end of memory is used, one byte
further is not (the answer arrives through wasmext_alloc, intact), and the first
byte past memory is never written. Pins the boundary of the check that
tests/sandbox/test_answer_region.py covers away from it.
"""

from __future__ import annotations

import time

import msgpack
import pytest

from wasmext import Plugin, Runtime
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, RESPONSE_AT, guest_wat, load_wat

GET = msgpack.packb({"op": "config.get", "key": "greeting"})
ANSWER = msgpack.packb({"ok": True, "value": "hi"})  # what config.get answers: 14 bytes
END = 2 * 65536  # the guests' memory: two pages
WHERE = {"ok": True, "value": False}
WHERE_BYTE = RESPONSE_AT + len(msgpack.packb(WHERE)) - 1


def _guest(rt: Runtime, pid: str, ptr: int, size: int) -> Plugin:
    """A guest answering whether its one host call's answer came back at `ptr` (and
    keeping that answer's bytes at DATA_AT + 64, for the test to read)."""
    call = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)}))"
    body = f"""(local $r i64)
      (local.set $r {call})
      (memory.copy (i32.const {DATA_AT + 64})
                   (i32.wrap_i64 (i64.shr_u (local.get $r) (i64.const 32)))
                   (i32.wrap_i64 (local.get $r)))
      (i32.store8 (i32.const {WHERE_BYTE})
        (i32.add (i32.const 0xc2)
                 (i64.eq (i64.shr_u (local.get $r) (i64.const 32)) (i64.const {ptr}))))
      (i64.const {(RESPONSE_AT << 32) | len(msgpack.packb(WHERE))})"""
    reg = {"hooks": [{"hook": "test"}], "abi_minor": 3,
           "answer_region": {"ptr": ptr, "size": size}}
    plugin = load_wat(rt, guest_wat(body, response=WHERE, imports=HOST_CALL_IMPORT,
                                    data=GET, registration=reg),
                      plugin_id=pid, settings={"greeting": "hi"})
    assert isinstance(plugin, Plugin)
    return plugin


@pytest.mark.parametrize(("ptr", "size", "used"), [
    (END - len(ANSWER), len(ANSWER), True),        # ends exactly at the end of memory
    (END - len(ANSWER), 64, True),                 # declared past it; the answer fits
    (END - len(ANSWER) + 1, len(ANSWER), False),   # one byte past: not written there
    (END, 16, False),                              # starts at the end
])
def test_an_area_at_the_end_of_memory_is_used_only_while_the_answer_fits(
        runtime: Runtime, healthy: Plugin, ptr: int, size: int, used: bool) -> None:
    started = time.monotonic()
    plugin = _guest(runtime, "edge", ptr, size)
    assert [plugin.call("test").value for _ in range(3)] == [used] * 3
    assert time.monotonic() - started < 10
    inst = plugin._idle[0]
    memory = inst.memory.view
    # The answer the guest got was intact wherever it came.
    assert memory[DATA_AT + 64:DATA_AT + 64 + len(ANSWER)].tobytes() == ANSWER
    if used:
        assert memory[ptr:ptr + len(ANSWER)].tobytes() == ANSWER
    else:
        assert memory[ptr:END].tobytes() == bytes(END - ptr)  # nothing written there
        assert inst._alloc_fn is not None  # delivered through wasmext_alloc instead
    assert inst.memory.size() == END  # and memory did not have to grow for it
    assert healthy.call("test").value == "alive"
