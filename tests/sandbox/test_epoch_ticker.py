"""The epoch ticker (sandbox.epoch): a POSIX timer that advances the epoch without
Python where the C library has one, a Python thread elsewhere; guests time out under
either, in a forked child too, and a process exits cleanly with its timer running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

from wasmext import Runtime, Timeout
from wasmext.sandbox import epoch
from wasmext.sandbox.engine import EngineConfig, SharedEngine
from wasmext.testing import guest_wat, load_wat

SPIN = guest_wat("(loop (br 0)) (i64.const 0)")
LINUX = sys.platform.startswith("linux")


def _spin(runtime: Runtime, plugin_id: str) -> Any:
    return load_wat(runtime, SPIN, plugin_id=plugin_id,
                    limits={"fuel_per_call": 10**13, "timeout_ms": 200})


def _times_out(runtime: Runtime, plugin_id: str, spin: Any = None) -> None:
    spin = spin or _spin(runtime, plugin_id)
    started = time.monotonic()
    with pytest.raises(Timeout):
        spin.call("test")
    assert time.monotonic() - started < 3


@pytest.mark.skipif(not LINUX, reason="POSIX timers with thread notification are Linux's")
def test_the_engine_ticks_without_a_python_thread(runtime: Runtime, healthy: object) -> None:
    assert runtime.engine._ticker.kind == "timer"
    assert not [t for t in threading.enumerate() if t.name == "wasmext-epoch"]
    _times_out(runtime, "spin-timer")
    # A thread running Python the whole time does not hold the deadline back.
    stop = threading.Event()

    def busy() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    spinner = threading.Thread(target=busy, daemon=True)
    spinner.start()
    try:
        _times_out(runtime, "spin-busy")
    finally:
        stop.set()
        spinner.join()


def test_a_python_thread_ticks_where_no_timer_can_be_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(epoch.TimerTicker, "start", classmethod(lambda cls, engine: None))
    engine = SharedEngine(EngineConfig(instance_pool=0, cranelift_opt_level="none"))
    try:
        assert engine._ticker.kind == "thread"
        with Runtime(cache=False, engine=engine) as runtime:
            _times_out(runtime, "spin-thread")
            healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}))
            assert healthy.call("test").value == "alive"
    finally:
        engine.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_ticks_again(runtime: Runtime) -> None:
    # A child inherits neither the parent's timers nor its threads: without ticking
    # anew, its spinning guest ran on past every deadline. (The plugin is compiled
    # before the fork: wasmtime's compiler threads do not survive one either.)
    spin = _spin(runtime, "spin-child")
    pid = os.fork()
    if pid == 0:  # the child: its exit status says what happened
        code = 2
        try:
            _times_out(runtime, "spin-child", spin)
            # A Python thread ticks there: glibc's timer lock may be held for good.
            code = 0 if runtime.engine._ticker.kind == "thread" else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_process_exits_cleanly_while_its_engine_ticks() -> None:
    # The timer's thread must never tick an engine the interpreter has freed.
    script = textwrap.dedent("""
        from wasmext import Runtime
        from wasmext.testing import guest_wat, load_wat
        runtime = Runtime(cache=False)
        print(load_wat(runtime, guest_wat(response={"ok": True, "value": "up"})).call("test").value)
    """)
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "up"
