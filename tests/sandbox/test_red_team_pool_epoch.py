"""Hostile plugins against the instance pool and the epoch deadline (sandbox.engine,
sandbox.epoch): nesting their own tools to fill the pool from inside one call, making
the host (WASI, host calls) work while the wall clock runs, spinning in a forked child.
Each ends named, in bounded time, and a healthy plugin answers afterwards."""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from wasmext import Runtime
from wasmext.config import HostConfig
from wasmext.errors import HostCallLimitExceeded, InstancePoolFull, Timeout, WasmextError
from wasmext.sandbox.engine import EngineConfig
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import (
    DATA_AT,
    HOST_CALL_IMPORT,
    guest_wat,
    host_calls_wat,
    load_wat,
    make_host,
    packed,
    wat_bytes,
)

ALIVE = {"ok": True, "value": "alive"}
SPIN = guest_wat("(loop (br 0)) (i64.const 0)")
LONG = {"fuel_per_call": 10**13, "timeout_ms": 200}
MIB = 1 << 20


def _rss_mib() -> int:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _ends_named(call: Callable[[], Any], named: type[WasmextError], within_s: float
                ) -> WasmextError:
    started = time.monotonic()
    with pytest.raises(named) as caught:
        call()
    assert time.monotonic() - started < within_s
    return caught.value


# -- the pool, from inside one call ---------------------------------------------------

SELF_TOOL = {"hooks": [{"hook": "on_tool"}, {"hook": "test"}], "name": "rec",
             "tools": [{"name": "again", "description": "calls itself",
                        "input_schema": {"type": "object"}}]}


@pytest.mark.parametrize("pool", [3, 12])
def test_a_plugin_calling_its_own_tool_cannot_hold_the_pool(tmp_path: Path, pool: int) -> None:
    # Each nested tool call takes an instance while the ones above it wait: a small pool
    # is full half way down (the innermost tool call is answered "instance pool full"),
    # a large one stops at the nesting bound. Either way every slot is back afterwards.
    rec = host_calls_wat({"op": "tool.call", "name": "rec__again", "args": {}},
                         registration=SELF_TOOL)
    config = HostConfig(data_dir=tmp_path, state_backend="memory", instance_pool=pool)
    with make_host((guest_wat(response=ALIVE), {"plugin_id": "healthy"}),
                   (rec, {"plugin_id": "rec", "grants": ["tools", "tool:rec__*"]}),
                   config=config) as host:
        for _ in range(3):
            started = time.monotonic()
            result, why = host.try_call("rec", "test", None)
            assert time.monotonic() - started < 5
            assert why is None and result is not None
            text = str(result.value)
            assert ("instance pool full" in text) if pool == 3 else ("nested deeper" in text)
        healthy = host.plugins["healthy"].plugin
        assert isinstance(healthy, Plugin)
        held = [healthy.new_instance() for _ in range(pool)]  # idle ones give way
        assert [inst.call("test", None).value for inst in held] == ["alive"] * pool
        with pytest.raises(InstancePoolFull):
            healthy.new_instance()
        held.clear()
        assert healthy.call("test").value == "alive"


def test_four_tables_at_the_limit_take_one_slot_each_within_memory(healthy: Plugin) -> None:
    # Four tables of 100,000 elements each (the store limiter's default): every
    # instance is 3 MiB of tables, and two of them fill a pool of two, no more.
    tables = guest_wat(extra=" ".join(f"(table $t{n} 100000 funcref)" for n in range(4)))
    before = _rss_mib()
    with Runtime(cache=False, engine=EngineConfig(instance_pool=2)) as runtime:
        plugin = load_wat(runtime, tables, plugin_id="tables")
        held = [plugin.new_instance() for _ in range(2)]
        _ends_named(plugin.new_instance, InstancePoolFull, 2)
        assert _rss_mib() - before < 64
        held.pop()
        assert plugin.call("test").value == "ok"
    with Runtime(cache=False, engine=EngineConfig(instance_pool=2)) as runtime:
        over = guest_wat(extra="(table $t 100001 funcref)")
        with pytest.raises(WasmextError, match="table"):
            load_wat(runtime, over, plugin_id="over")
    assert healthy.call("test", 1).value == "alive"


# -- the deadline, while the host works for the guest -------------------------------

def _wasi(name: str, params: str) -> str:
    return (f'(import "wasi_snapshot_preview1" "{name}" '
            f'(func ${name} (param {params}) (result i32)))')


FD_WRITE = _wasi("fd_write", "i32 i32 i32 i32")
# One iovec at 65536 naming 1 MiB at 131072, written to stdout over and over.
ONE_MIB_IOVEC = ("(i32.store (i32.const 65536) (i32.const 131072))"
                 f"(i32.store (i32.const 65540) (i32.const {MIB}))")
WRITE_FOREVER = ("(loop (drop (call $fd_write (i32.const 1) (i32.const 65536) (i32.const 1)"
                 " (i32.const 65544))) (br 0)) (i64.const 0)")
WASI_LOOPS = {
    "fd_write of 1 MiB of newlines": (
        FD_WRITE, f"(memory.fill (i32.const 131072) (i32.const 10) (i32.const {MIB}))"
        + ONE_MIB_IOVEC + WRITE_FOREVER, 40),
    "fd_write of 1024 iovecs naming 2.5 MiB each": (
        FD_WRITE, "(local $i i32) (loop"
        " (i32.store (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 3)))"
        " (i32.const 0))"
        " (i32.store (i32.add (i32.const 65540) (i32.shl (local.get $i) (i32.const 3)))"
        " (i32.const 2621440))"
        " (local.set $i (i32.add (local.get $i) (i32.const 1)))"
        " (br_if 0 (i32.lt_u (local.get $i) (i32.const 1024))))"
        + WRITE_FOREVER, 40),
    "random_get of 40 MiB": (
        _wasi("random_get", "i32 i32"),
        "(loop (drop (call $random_get (i32.const 0) (i32.const 41943040))) (br 0))"
        " (i64.const 0)", 640),
    "clock_time_get": (
        _wasi("clock_time_get", "i32 i64 i32"),
        "(loop (drop (call $clock_time_get (i32.const 1) (i64.const 0) (i32.const 0)))"
        " (br 0)) (i64.const 0)", 2),
    "sched_yield": (_wasi("sched_yield", ""),
                    "(loop (drop (call $sched_yield)) (br 0)) (i64.const 0)", 2),
}


@pytest.mark.parametrize("attack", sorted(WASI_LOOPS))
def test_a_guest_looping_on_wasi_calls_times_out(runtime: Runtime, healthy: Plugin,
                                                 attack: str) -> None:
    # WASI calls are not host_call (no max_host_calls): only the deadline stops the loop,
    # and the host's share of each round (copying, logging, random bytes) is short.
    imports, body, pages = WASI_LOOPS[attack]
    before = _rss_mib()
    plugin = load_wat(runtime, guest_wat(body, imports=imports, memory_pages=pages),
                      plugin_id="wasi-loop", limits=LONG)
    for _ in range(2):
        _ends_named(lambda: plugin.call("test"), Timeout, 2)
    assert _rss_mib() - before < 256  # the guest's 40 MiB, the host's copies of it
    assert len(plugin.log.lines) <= plugin.limits.max_log_lines
    assert healthy.call("test", 1).value == "alive"


def _looping(request: dict[str, Any]) -> str:
    blob = msgpack.packb(request)
    return guest_wat(f"(loop (drop (call $host_call (i32.const {DATA_AT}) "
                     f"(i32.const {len(blob)}))) (br 0)) (i64.const 0)",
                     imports=HOST_CALL_IMPORT, data=blob)


NESTED = [[[[[[[[{"a": [1] * 10}]]]]]]]] * 1000
HOST_WORK: dict[str, tuple[dict[str, Any], list[str]]] = {
    "state.set of 200 KB": ({"op": "state.set", "key": "k", "value": "x" * 200_000,
                             "scope": "plugin"}, ["state"]),
    "state.set of 5000 keys": ({"op": "state.set", "key": "k", "scope": "plugin",
                                "value": {str(i): i for i in range(5000)}}, ["state"]),
    "log of 200 KB": ({"op": "log", "level": "info", "msg": "x" * 200_000}, []),
    "event.emit of nested payloads": ({"op": "event.emit", "topic": "t.x",
                                       "payload": NESTED}, ["events", "emit:*"]),
    "a denied tool.call with nested args": ({"op": "tool.call", "name": "nope__x",
                                             "args": NESTED}, []),
}


@pytest.mark.parametrize("attack", sorted(HOST_WORK))
def test_a_guest_making_the_host_work_in_a_loop_is_stopped(attack: str) -> None:
    # The guest does nothing but hand the host heavy requests: host time counts as the
    # call's wall clock, and the host-call count bounds the rest.
    request, grants = HOST_WORK[attack]
    with make_host((guest_wat(response=ALIVE), {"plugin_id": "healthy"}),
                   (_looping(request), {"plugin_id": "worker", "grants": grants, "limits": {
                       **LONG, "max_host_calls": 10**6, "host_call_timeout_ms": 60_000}})
                   ) as host:
        worker = host.plugins["worker"].plugin
        before = _rss_mib()
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises((Timeout, HostCallLimitExceeded)):
                worker.call("test", None, {"session": "s"})
            assert time.monotonic() - started < 2
        assert _rss_mib() - before < 256
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_guests_spinning_on_many_threads_all_time_out(runtime: Runtime,
                                                      healthy: Plugin) -> None:
    # Each deadline check takes the GIL: eight guests spinning at once, beside a thread
    # running Python, still end at their deadlines.
    spin = load_wat(runtime, SPIN, plugin_id="spin", limits=LONG)
    took: list[float] = []
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    def one() -> None:
        started = time.monotonic()
        with pytest.raises(Timeout):
            spin.call("test")
        took.append(time.monotonic() - started)

    python = threading.Thread(target=busy, daemon=True)
    python.start()
    threads = [threading.Thread(target=one) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        python.join()
    assert len(took) == 8 and max(took) < 5
    assert healthy.call("test", 1).value == "alive"


# -- a forked child -----------------------------------------------------------------

def _child_exit_code(child: Callable[[], int], within_s: float = 60) -> int:
    """Run `child` in a forked process; its exit code (it is killed, and the test fails,
    when it has not ended within `within_s`)."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = child()
        finally:
            os._exit(code)
    ends = time.monotonic() + within_s
    while time.monotonic() < ends:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not end within {within_s} s")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_compiles_and_times_out_a_new_spinning_guest(runtime: Runtime) -> None:
    # A server that loads its plugins and then forks workers (a pre-fork server) loads
    # or reloads a plugin in a worker: wasmtime's compiler threads did not survive the
    # fork, and the worker's compile waited for them for good.
    healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
    parent_spin = load_wat(runtime, SPIN, plugin_id="parent-spin", limits=LONG)
    spinning = threading.Thread(target=lambda: _swallow(parent_spin.call))
    spinning.start()  # a guest running in the parent while it forks
    time.sleep(0.05)

    def child() -> int:
        spin = load_wat(runtime, SPIN, plugin_id="child-spin", limits=LONG)
        _ends_named(lambda: spin.call("test"), Timeout, 3)
        grandchild = _child_exit_code(lambda: _times_out_fresh(runtime), 30)
        fresh = Runtime(cache=False, engine=EngineConfig(instance_pool=2))
        assert _times_out_fresh(fresh) == 0
        return 0 if grandchild == 0 and healthy.call("test").value == "alive" else 1

    try:
        assert _child_exit_code(child) == 0
    finally:
        spinning.join()
    assert healthy.call("test").value == "alive"


def _times_out_fresh(runtime: Runtime) -> int:
    """0 when a plugin compiled here spins into Timeout within bounds."""
    spin = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 1)"), plugin_id="fresh",
                    limits=LONG)
    _ends_named(lambda: spin.call("test"), Timeout, 3)
    return 0


def _swallow(call: Callable[[str], Any]) -> None:
    with pytest.raises(Timeout):
        call("test")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_hosts_spinning_event_and_tick_guests_run_and_time_out() -> None:
    # The bus's workers and the ticking thread are the parent's: in the child the bus
    # believed its worker alive (no event was ever delivered, `flush` waited for good)
    # and no plugin ticked again. There, spinning guests reached by an event and by a
    # tick run, and each ends at its deadline.
    spinning = {"fuel_per_call": 10**13, "timeout_ms": 100}
    listener = guest_wat("(loop (br 0)) (i64.const 0)", registration={
        "hooks": [{"hook": "on_event"}], "subscriptions": ["spin.*"]})
    ticking = guest_wat("(loop (br 0)) (i64.const 0)", abi_version=1, registration={
        "hooks": [{"hook": "on_tick"}], "tick": {"interval_ms": 1000}, "abi_minor": 2})
    with make_host((guest_wat(response=ALIVE), {"plugin_id": "healthy"}),
                   (listener, {"plugin_id": "listener", "limits": spinning,
                               "grants": ["events", "subscribe:spin.*"]}),
                   (ticking, {"plugin_id": "ticking", "limits": spinning})) as host:
        bus = host.observe.bus
        for _ in range(3):  # a worker of the parent's is busy at the fork
            bus.emit("spin.parent")
        listener_plugin = host.plugins["listener"].plugin

        def child() -> int:
            before = listener_plugin.calls
            started = time.monotonic()
            bus.emit("spin.child")
            assert bus.flush(5)
            assert time.monotonic() - started < 3
            assert listener_plugin.calls == before + 1  # the child's event, once
            assert isinstance(listener_plugin.last_fault, Timeout)
            ticks = host.observe.ticks.ticks_run
            ends = time.monotonic() + 5
            while host.observe.ticks.ticks_run == ticks and time.monotonic() < ends:
                time.sleep(0.05)
            assert host.observe.ticks.ticks_run > ticks
            assert host.plugins["healthy"].plugin.call("test").value == "alive"
            return 0

        assert _child_exit_code(child) == 0
        assert bus.flush(10)
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


@pytest.mark.parametrize("item", [b"\x90", b"\x80", b"\x91\x90"], ids=["[]", "{}", "[[]]"])
def test_an_answer_of_a_million_empty_containers_is_read_in_bounds(
        runtime: Runtime, healthy: Plugin, item: bytes) -> None:
    # The guest's work is one memory.fill; the host's is decoding and checking 1 MiB of
    # containers (the answer's cap) after the call's deadline: the check walked them one
    # by one in Python, 0.8 s of the host's time for a 100 ms plugin.
    count = (MIB - 64) // len(item)
    head = (b"\x82\xa2ok\xc3\xa5value\xdd" + count.to_bytes(4, "big"))
    at, fill = 2 * 65536, 2 * 65536 + len(head)
    body = (f"(local $at i32) (memory.fill (i32.const {fill}) (i32.const {item[0]})"
            f" (i32.const {count * len(item)}))"
            + ("" if len(item) == 1 else
               f"(local.set $at (i32.const {fill})) (loop"
               f" (i32.store8 offset=1 (local.get $at) (i32.const {item[1]}))"
               " (local.set $at (i32.add (local.get $at) (i32.const 2)))"
               f" (br_if 0 (i32.lt_u (local.get $at) (i32.const {fill + 2 * count}))))")
            + f"(i64.const {packed(at, len(head) + count * len(item))})")
    wat = guest_wat(body, memory_pages=20, extra=f'(data (i32.const {at}) "{wat_bytes(head)}")')
    plugin = load_wat(runtime, wat, plugin_id="wide", limits={"timeout_ms": 100})
    before = _rss_mib()
    for _ in range(2):
        started = time.monotonic()
        value = plugin.call("test").value
        assert time.monotonic() - started < 3
        assert len(value) == count and value[0] == msgpack.unpackb(item)
        del value
    assert _rss_mib() - before < 400
    assert healthy.call("test", 1).value == "alive"
