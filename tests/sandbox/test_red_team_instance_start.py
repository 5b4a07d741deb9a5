"""Reentrancy at instance start-up (h-instance's fast paths; red team).

The request buffer is the first thing an instance's start asks of wasmext_alloc, through
the binding's one scratch area for start-up calls. A guest whose allocator calls the
host, whose answer needs the allocator again, recurses through the host: that ends at
`max_host_calls` as a named error with a short message, the scratch area's result is
never confused with a nested call's, and the host serves a healthy plugin afterwards.
A start function that calls the host (the ABI has no host calls before the instance
has started) is refused as AbiMismatch, not as a missing attribute inside the host.
"""

from __future__ import annotations

import time

import msgpack
import pytest

from wasmext import AbiMismatch, HostCallLimitExceeded, Plugin, Runtime
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat, load_wat

GET = msgpack.packb({"op": "config.get", "key": "greeting"})


def _recursing_alloc(calls: str) -> str:
    return f"""
        (local $p i32)
        {calls}
        (local.set $p (global.get $heap))
        (global.set $heap (i32.add (global.get $heap)
                                   (i32.and (i32.add (local.get $n) (i32.const 7))
                                            (i32.const -8))))
        (local.get $p)"""


def test_an_allocator_that_calls_the_host_at_start_up_ends_at_max_host_calls(
        runtime: Runtime, healthy: Plugin) -> None:
    call = f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)})))"
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)}))",
                    imports=HOST_CALL_IMPORT, data=GET, memory_pages=4,
                    alloc_body=_recursing_alloc(call),
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 3,
                                  "answer_region": {"ptr": 16384, "size": 32}})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded) as err:
        # An answer larger than any area: every one goes through the allocator again.
        load_wat(runtime, wat, plugin_id="recurse", settings={"greeting": "y" * 100},
                 limits={"max_host_calls": 50})
    assert time.monotonic() - started < 5
    assert len(str(err.value)) < 300
    assert "recurse" not in runtime.plugins
    assert healthy.call("test").value == "alive"


def test_an_allocator_that_calls_the_host_once_still_gets_its_own_result(
        runtime: Runtime, healthy: Plugin) -> None:
    # One host call from inside the start-up allocation (its small answer needs no
    # allocator): the allocation's result, read from the scratch area after the call,
    # is the allocator's, not the nested call's.
    once = (f"(if (i32.eqz (global.get $called)) (then (global.set $called (i32.const 1)) "
            f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)})))))")
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)}))",
                    imports=HOST_CALL_IMPORT, data=GET, memory_pages=4,
                    alloc_body=_recursing_alloc(once),
                    extra="(global $called (mut i32) (i32.const 0))")
    plugin = load_wat(runtime, wat, plugin_id="nested", settings={"greeting": "hi"})
    assert [plugin.call("test").value for _ in range(3)] == ["hi"] * 3
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("body", [
    f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(GET)})))",
    f"(call $log (i32.const 2) (i32.const {DATA_AT}) (i32.const 4))",
])
def test_a_start_function_that_calls_the_host_is_refused_by_name(
        runtime: Runtime, healthy: Plugin, body: str) -> None:
    imports = HOST_CALL_IMPORT + '(import "wasmext" "log" (func $log (param i32 i32 i32)))'
    wat = guest_wat(imports=imports, data=GET, extra=f"(func $st {body}) (start $st)")
    started = time.monotonic()
    with pytest.raises(AbiMismatch, match="a start function called the host") as err:
        load_wat(runtime, wat, plugin_id="starter", settings={"greeting": "hi"})
    assert time.monotonic() - started < 5
    assert "attribute" not in str(err.value)  # no Python internals for the operator
    assert "starter" not in runtime.plugins
    assert healthy.call("test").value == "alive"
