"""The cached host-function trampoline behaves exactly like wasmtime-py's public one.

Each test runs twice: on the fast trampoline and on `Linker.define_func` (the
fallback), each on an engine of its own, since the linker is built per engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from fsguest import Script, errno, read_back

from support import run_in_threads
from wasmext import GuestTrap, InvalidOutput, Plugin, PluginError, PluginFault, Runtime
from wasmext.sandbox import hostlink, hosttramp
from wasmext.sandbox.engine import EngineConfig
from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, load_wat, packed

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'
_STACKS = {"fast": 700 * 1024, "public": 701 * 1024}  # one engine (and linker) per path


def test_fast_trampoline_is_active_on_the_pinned_wasmtime() -> None:
    assert hosttramp.FAST_HOST_CALLS


@pytest.fixture(params=["fast", "public"])
def rt(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setattr(hostlink, "_FAST", request.param == "fast")
    # WASI on the trampoline stays tested while the host serves it on the public API.
    monkeypatch.setattr(hostlink, "_FAST_WASI", request.param == "fast")
    with Runtime(cache=False,
                 engine=EngineConfig(max_wasm_stack_bytes=_STACKS[request.param])) as runtime:
        yield runtime


def _forwarder(rt: Runtime, request: object, **kwargs: object):  # type: ignore[no-untyped-def]
    raw = request if isinstance(request, bytes) else msgpack.packb(request)
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    return load_wat(rt, guest_wat(body, imports=HOST_CALL, data=raw), **kwargs)


def test_host_call_answers_the_same(rt: Runtime) -> None:
    plugin = _forwarder(rt, {"op": "config.get", "key": "greeting"},
                        settings={"greeting": "Hallo " * 1000})
    for _ in range(3):
        assert plugin.call("test").value == "Hallo " * 1000
    with pytest.raises(PluginError) as info:
        _forwarder(rt, {"op": "no.such.op"}, plugin_id="other").call("test")
    assert info.value.code == "unsupported"


def test_answers_written_into_the_guests_answer_region_arrive_the_same(rt: Runtime) -> None:
    raw = msgpack.packb({"op": "config.get", "key": "greeting"})
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    registration = {"hooks": [{"hook": "test"}], "abi_minor": 3,
                    "answer_region": {"ptr": 16384, "size": 64}}
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL, data=raw,
                                    registration=registration), settings={"greeting": "hi"})
    assert [plugin.call("test").value for _ in range(3)] == ["hi"] * 3
    assert all(inst._alloc_fn is None for inst in plugin._idle)  # no wasmext_alloc entry
    plugin.settings["greeting"] = "long " * 40  # past the region: through wasmext_alloc
    assert plugin.call("test").value == "long " * 40


def test_a_high_pointer_reaches_the_host_unsigned(rt: Runtime) -> None:
    # 0xFFFF_FFF0 is out of memory: the host must see it as such, not as a negative.
    body = "(call $host_call (i32.const -16) (i32.const 8))"
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL))
    with pytest.raises(InvalidOutput, match="0xfffffff0"):
        plugin.call("test")
    healthy = _forwarder(rt, {"op": "abi.info"}, plugin_id="healthy")
    assert healthy.call("test").value["major"] == 1


def test_log_lines_arrive_the_same(rt: Runtime) -> None:
    text = b"hello from the guest"
    body = f"(call $log (i32.const 3) (i32.const {DATA_AT}) (i32.const {len(text)})) (i64.const 0)"
    plugin = load_wat(rt, guest_wat(body, imports=LOG, data=text))
    plugin.call("test")
    line = plugin.log.lines[-1]
    assert (line.level, line.text) == ("warn", "hello from the guest")


def test_an_exception_in_the_host_function_becomes_the_same_fault(rt: Runtime) -> None:
    # A log call outside memory makes on_log raise inside the trampoline.
    body = "(call $log (i32.const 2) (i32.const -8) (i32.const 64)) (i64.const 0)"
    plugin = load_wat(rt, guest_wat(body, imports=LOG))
    with pytest.raises(PluginFault) as info:
        plugin.call("test")
    assert info.value.plugin_id == plugin.id and "0xfffffff8" in info.value.message
    healthy = _forwarder(rt, {"op": "abi.info"}, plugin_id="healthy")
    assert healthy.call("test").value["major"] == 1


def test_threads_each_find_their_own_guest(rt: Runtime) -> None:
    plugins = [_forwarder(rt, {"op": "config.get", "key": "n"}, plugin_id=f"p{i}",
                          settings={"n": i}) for i in range(4)]
    errors: list[str] = []

    def work(i: int) -> None:
        for _ in range(200):
            got = plugins[i].call("test").value
            if got != i:
                errors.append(f"plugin {i} got {got}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_wasi_calls_answer_the_same(rt: Runtime, tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    (box / "a.txt").write_bytes(b"same")
    s = Script()
    s.prestat_name(3, 300)
    s.read(s.open("a.txt"), 16)
    s.open("../a.txt")
    plugin = load_wat(rt, s.wat(), grants=frozenset([f"fs:{box}"]))
    value = bytes(plugin.call("test").value)
    assert [errno(value, i) for i in range(4)] == [0, 0, 0, 76]
    assert read_back(value, 0, 16) == b"same" and read_back(value, 300, 8) == b"/box"
    exits = load_wat(rt, guest_wat("(call $proc_exit (i32.const 7)) (i64.const 0)",
                                   imports='(import "wasi_snapshot_preview1" "proc_exit" '
                                           '(func $proc_exit (param i32)))'), plugin_id="exits")
    with pytest.raises(GuestTrap, match=r"proc_exit\(7\)"):
        exits.call("test")


def test_a_host_error_never_reaches_another_threads_call(rt: Runtime) -> None:
    # One plugin's host function raises (a log call outside memory), another traps in
    # wasm with no Python exception, on two threads. wasmtime-py keeps a host function's
    # exception in one process-wide global until the failed call re-raises it, so the
    # trapping call could take the other plugin's error, message and plugin id included.
    slow_ok = {"timeout_ms": 60_000}  # the switching slows a loaded machine a lot
    leaky = load_wat(rt, guest_wat("(call $log (i32.const 2) (i32.const -8) (i32.const 64)) "
                                   "(i64.const 0)", imports=LOG), plugin_id="leaky",
                     limits=slow_ok)
    trapping = load_wat(rt, guest_wat("unreachable"), plugin_id="trapping", limits=slow_ok)
    seen: dict[str, set[tuple[str, str | None, str]]] = {"leaky": set(), "trapping": set()}
    stop = time.monotonic() + 1.5

    def work(plugin: Plugin) -> None:
        while time.monotonic() < stop:
            plugin.release_quarantine()
            try:
                plugin.call("test")
            except PluginFault as fault:
                seen[plugin.id].add((type(fault).__name__, fault.plugin_id,
                                     fault.message.split(":")[0]))

    # Many thread switches: the window is a few bytecodes.
    pair = (leaky, trapping)
    assert run_in_threads(lambda i: work(pair[i]), 2, switch_interval=1e-6) == []
    assert seen["leaky"] == {("InvalidOutput", "leaky", "log text ptr 0xfffffff8 len 64 is "
                                                        "outside memory")}
    assert seen["trapping"] == {("GuestTrap", "trapping", "wasmext_call")}
    assert _forwarder(rt, {"op": "abi.info"}, plugin_id="healthy").call("test").value["major"] == 1


_WASI = "\n".join(
    f'(import "wasi_snapshot_preview1" "{name}" (func ${name} {sig}))' for name, sig in (
        ("random_get", "(param i32 i32) (result i32)"),
        ("clock_time_get", "(param i32 i64 i32) (result i32)"),
        ("fd_write", "(param i32 i32 i32 i32) (result i32)")))
# Each round grows memory by a page, then: random_get fills the 32 bytes just below the
# new end (a canary after them must survive) and answers EFAULT for a buffer crossing
# the end; the monotonic clock lands below the buffer and never goes back; fd_write of
# a "grown" line says 6 bytes. Any wrong answer traps.
_GROWING_WASI = """
  (local $i i32) (local $top i32) (local $last i64)
  (loop $round
    (drop (memory.grow (i32.const 1)))
    (local.set $top (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 64)))
    (i64.store (i32.add (local.get $top) (i32.const 32)) (i64.const -6076574518398440533))
    (i64.store (i32.add (local.get $top) (i32.const 40)) (i64.const -6076574518398440533))
    (if (call $random_get (local.get $top) (i32.const 32)) (then unreachable))
    (if (i64.ne (i64.load (i32.add (local.get $top) (i32.const 32)))
                (i64.const -6076574518398440533)) (then unreachable))
    (if (i64.ne (i64.load (i32.add (local.get $top) (i32.const 40)))
                (i64.const -6076574518398440533)) (then unreachable))
    (if (i32.ne (call $random_get (i32.add (local.get $top) (i32.const 32)) (i32.const 64))
                (i32.const 21)) (then unreachable))
    (if (call $clock_time_get (i32.const 1) (i64.const 0) (i32.sub (local.get $top) (i32.const 8)))
      (then unreachable))
    (if (i64.lt_u (i64.load (i32.sub (local.get $top) (i32.const 8))) (local.get $last))
      (then unreachable))
    (local.set $last (i64.load (i32.sub (local.get $top) (i32.const 8))))
    (i32.store (i32.const 300) (i32.const 8192))
    (i32.store (i32.const 304) (i32.const 6))
    (if (call $fd_write (i32.const 1) (i32.const 300) (i32.const 1) (i32.const 320))
      (then unreachable))
    (if (i32.ne (i32.load (i32.const 320)) (i32.const 6)) (then unreachable))
    (local.set $i (i32.add (local.get $i) (i32.const 1)))
    (br_if $round (i32.lt_u (local.get $i) (i32.const 16))))
  (i64.const RESPONSE)"""


def test_wasi_answers_hold_while_memory_grows_on_several_threads(rt: Runtime) -> None:
    response = {"ok": True, "value": "grown"}
    body = _GROWING_WASI.replace("RESPONSE",
                                 str(packed(RESPONSE_AT, len(msgpack.packb(response)))))
    plugins = [load_wat(rt, guest_wat(body, imports=_WASI, data=b"grown\n", response=response,
                                      max_pages=600), plugin_id=f"grow{i}",
                        limits={"timeout_ms": 60_000})  # a loaded machine: never a time-out
               for i in range(3)]
    answers: list[object] = []

    def work(plugin: Plugin) -> None:
        for _ in range(30):  # 480 pages: past where the first instance's memory began
            try:
                answers.append(plugin.call("test").value)
            except PluginFault as fault:
                answers.append(fault.message)

    threads = [threading.Thread(target=work, args=(p,)) for p in plugins]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == ["grown"] * 90
    assert all((p.log.lines[-1].source, p.log.lines[-1].text) == ("stdout", "grown")
               for p in plugins)
