"""Cancelling a call interrupts its guest at once, also a guest spinning in one loop
without host calls or function calls (sandbox.watchdog): the named error, a time bound,
the memory bound, and the host (and the same plugin) answering afterwards; and the
fallback when wasmtime offers no epoch-deadline callback."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import msgpack
import pytest
from test_budget_attacks import OVERHEAD_KB, run_child

from support import cancel_call
from wasmext import Cancelled, Plugin, Runtime, Timeout
from wasmext.sandbox import watchdog
from wasmext.sandbox.callscope import CallScope
from wasmext.testing import RESPONSE_AT, guest_wat, load_wat, packed

TIMEOUT_MS = 20_000
LONG = {"timeout_ms": TIMEOUT_MS, "fuel_per_call": 10**15}
SPIN_ABOVE = 1500  # request bytes: a longer request spins, a short one answers
_ALIVE = {"ok": True, "value": "alive"}
_ANSWER = f"(i64.const {packed(RESPONSE_AT, len(msgpack.packb(_ALIVE)))})"
# `loop br 0`: no call, no host call; only the loop's back-edge checks the epoch.
SPIN = guest_wat(f"(if (i32.gt_u (local.get $l) (i32.const {SPIN_ABOVE})) "
                 f"(then (loop $spin (br $spin)))) {_ANSWER}", response=_ALIVE)
# The same spinning through a function call: function entry re-reads the deadline.
SPIN_CALLING = guest_wat(f"(if (i32.gt_u (local.get $l) (i32.const {SPIN_ABOVE})) "
                         f"(then (loop $spin (call $tick) (br $spin)))) {_ANSWER}",
                         response=_ALIVE, extra="(func $tick)")
BIG = "x" * (2 * SPIN_ABOVE)


def cancel_while_spinning(plugin: Plugin, spin_s: float = 0.2
                          ) -> tuple[BaseException | None, float, float]:
    return cancel_call(plugin, "test", BIG, spin_s)


def test_cancel_interrupts_a_guest_spinning_without_calls(runtime: Runtime,
                                                          healthy: Plugin) -> None:
    assert watchdog.WATCHDOG  # this wasmtime is in fastcall's verified range
    spin = load_wat(runtime, SPIN, "spin", limits=LONG)
    error, ran, after_cancel = cancel_while_spinning(spin)
    assert isinstance(error, Cancelled), repr(error)
    assert error.plugin_id == "spin" and error.hook == "test"
    assert "cancelled" in error.describe()
    assert ran >= 0.2  # it did spin until the cancel ...
    assert after_cancel < TIMEOUT_MS / 1000 / 2  # ... and ended long before its time-out
    assert healthy.call("test", "ping").value == "alive"
    assert spin.call("test", "short").value == "alive"  # the same plugin answers too


def test_a_cancel_never_writes_a_watched_store_from_another_thread(runtime: Runtime) -> None:
    """wasmtime's Store is not Sync: only the guest's own thread may touch it while it runs."""
    spin = load_wat(runtime, SPIN, "spin", limits=LONG)
    inst = spin._borrow()
    assert inst.watched
    writers: set[str] = set()
    original = inst.store.set_epoch_deadline

    def recorded(ticks: int) -> None:
        writers.add(threading.current_thread().name)
        original(ticks)

    inst.store.set_epoch_deadline = recorded  # type: ignore[method-assign]
    spin._release(inst)
    error, _ran, after_cancel = cancel_while_spinning(spin)
    assert isinstance(error, Cancelled) and after_cancel < TIMEOUT_MS / 1000 / 2
    # The guest's thread sets its deadline through the C API, not this method: any
    # call here came from the cancelling side (as it did before the watchdog).
    assert writers == set(), writers


def test_cancels_are_not_the_plugins_fault(runtime: Runtime) -> None:
    spin = load_wat(runtime, SPIN, "spin", limits=LONG)
    for _ in range(spin.quarantine.max_faults + 1):
        error, _ran, after_cancel = cancel_while_spinning(spin, spin_s=0.05)
        assert isinstance(error, Cancelled), repr(error)
        assert after_cancel < TIMEOUT_MS / 1000 / 2
    assert spin.faults == 0 and not spin.quarantined
    assert spin.call("test", "short").value == "alive"


def test_a_spinning_guest_nobody_cancels_still_times_out(runtime: Runtime,
                                                         healthy: Plugin) -> None:
    spin = load_wat(runtime, SPIN, "spin", limits={"timeout_ms": 300, "fuel_per_call": 10**15})
    started = time.monotonic()
    with pytest.raises(Timeout, match="ran past 300 ms"):
        spin.call("test", BIG)
    assert 0.3 <= time.monotonic() - started < 10
    with CallScope().bound(), pytest.raises(Timeout, match="ran past 300 ms"):
        spin.call("test", BIG)  # cancellable, not cancelled: its own time-out
    assert healthy.call("test", "ping").value == "alive"


@pytest.mark.parametrize("wat", [SPIN, SPIN_CALLING], ids=["loop", "loop-calling"])
def test_without_the_watchdog_deadlines_hold(runtime: Runtime, healthy: Plugin,
                                             wat: str) -> None:
    with watchdog.unwatched():
        spin = load_wat(runtime, wat, "spin", limits={"timeout_ms": 300,
                                                      "fuel_per_call": 10**15})
    assert spin._borrow()._ticks > 1  # the whole timeout is the epoch deadline
    started = time.monotonic()
    with pytest.raises(Timeout):
        spin.call("test", BIG)
    assert time.monotonic() - started < 10
    assert healthy.call("test", "ping").value == "alive"


def test_without_the_watchdog_a_cancel_is_seen_at_function_entry(runtime: Runtime,
                                                                  healthy: Plugin) -> None:
    with watchdog.unwatched():
        spin = load_wat(runtime, SPIN_CALLING, "spin", limits=LONG)
    error, _ran, after_cancel = cancel_while_spinning(spin)
    assert isinstance(error, Cancelled), repr(error)
    assert after_cancel < TIMEOUT_MS / 1000 / 2
    assert healthy.call("test", "ping").value == "alive"


def test_cancelled_spinning_stays_within_rss(tmp_path: Path) -> None:
    proc, peak_kb = run_child(f"""
        import threading, time
        from wasmext import Cancelled, Runtime
        from wasmext.sandbox.callscope import CallScope
        from wasmext.testing import load_wat
        with Runtime(cache=False) as rt:
            spin = load_wat(rt, {SPIN!r}, "spin", limits={{"timeout_ms": 20000,
                            "fuel_per_call": 10**15, "memory_bytes": 16 * 2**20}})
            kinds, slowest = set(), 0.0
            for _ in range(10):
                scope, box = CallScope(), {{}}
                def work():
                    with scope.bound():
                        try:
                            spin.call("test", {BIG!r})
                        except Exception as exc:
                            box["error"] = exc
                t = threading.Thread(target=work)
                t.start()
                time.sleep(0.05)
                c = time.monotonic()
                scope.cancel()
                t.join(30)
                slowest = max(slowest, time.monotonic() - c)
                kinds.add(type(box.get("error")).__name__)
            print(sorted(kinds), slowest < 10, spin.call("test", "short").value)
        """, tmp_path)
    assert proc.stdout.split() == ["['Cancelled']", "True", "alive"], proc.stderr
    assert peak_kb < 16 * 1024 + OVERHEAD_KB, peak_kb


def test_a_cancel_reaches_a_plugin_a_host_tool_calls(healthy: Plugin) -> None:
    """Outer plugin -> host tool (run in a run_bounded worker) -> spinning plugin."""
    from wasmext.testing import host_calls_wat, make_host

    calls_spinner = host_calls_wat({"op": "tool.call", "name": "spinner", "args": {}})
    seen: list[BaseException] = []
    with make_host((calls_spinner, {"plugin_id": "outer",
                                               "grants": {"tools", "tool:spinner"},
                                               "limits": LONG}),
                   (SPIN, {"plugin_id": "spin", "limits": LONG})) as host:
        def spinner(_args: object) -> object:
            try:
                return host.plugins["spin"].plugin.call("test", BIG).value
            except BaseException as exc:
                seen.append(exc)
                raise

        host.tools.register_python("spinner", spinner)
        outer = host.plugins["outer"].plugin
        error, ran, after_cancel = cancel_call(outer, "test", None)
        assert ran >= 0.2  # the outer guest drops the tool's error and answers
        assert error is None or isinstance(error, Cancelled), repr(error)
        assert after_cancel < TIMEOUT_MS / 1000 / 2  # not the inner plugin's 20 s time-out
        assert len(seen) == 1 and isinstance(seen[0], Cancelled), seen
        assert seen[0].plugin_id == "spin"
        assert host.plugins["spin"].plugin.call("test", "short").value == "alive"
        assert outer.faults == 0 and host.plugins["spin"].plugin.faults == 0
    assert healthy.call("test", "ping").value == "alive"
