"""Concurrent callers never share an instance, and host calls find their caller."""

from __future__ import annotations

import contextlib

import msgpack

from support import run_in_threads
from wasmext import GuestTrap, Quarantined, Runtime
from wasmext.testing import DATA_AT, guest_wat, load_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def test_threads_share_a_plugin(runtime: Runtime) -> None:
    plugins = []
    for name in ("alpha", "beta"):
        req = msgpack.packb({"op": "config.get", "key": "who"})
        body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))"
        plugins.append(load_wat(runtime, guest_wat(body, imports=HOST_CALL, data=req),
                                plugin_id=name, settings={"who": name}))
    crashy = load_wat(runtime, guest_wat("unreachable"), plugin_id="crashy")

    def worker(i: int) -> None:
        for n in range(300):
            plugin = plugins[(i + n) % 2]
            assert plugin.call("test", n).value == plugin.id
            if n % 50 == 0:
                with contextlib.suppress(GuestTrap, Quarantined):
                    crashy.call("test")

    assert run_in_threads(worker) == []
    assert crashy.faults >= 1
