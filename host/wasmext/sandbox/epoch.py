"""The epoch ticker: what advances an engine's epoch every `TICK_MS`.

Guest deadlines are epoch ticks (sandbox.budget, sandbox.watchdog), so something must
call wasmtime's `increment_epoch` on time while guests run, whatever Python does.

A Python thread can, but it needs the GIL at every tick, and a thread that runs Python
without pause holds the GIL for up to the interpreter's switch interval (5 ms, as long
as a tick). So the ticking thread spent about half its time waiting for the GIL, and
while a thread waits for it, every release of the GIL by another (each call into a guest
lets it go, as any foreign call that may block does) wakes the waiter through the
kernel: in a busy NATS worker a guest call cost 13.8 µs at the median instead of 0.6 µs
(docs/performance.md, ninth round).

Where the C library has POSIX timers, the tick is a timer whose expiry runs wasmtime's
`wasmtime_engine_increment_epoch` itself, on a thread of the C library's own
(`SIGEV_THREAD`): no Python runs and the GIL is never asked for. Elsewhere, or when no
timer can be made, a daemon Python thread ticks as before (`ThreadTicker`). Either
keeps the engine alive while it may still tick.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import functools
import sys
import threading
import weakref
from typing import Any, Protocol

import wasmtime

__all__ = ["TICK_MS", "Ticker", "forget_timers", "start_ticker"]

TICK_MS = 5

_SIGEV_THREAD = 2
_CLOCK_MONOTONIC = 1
# The timers ticking, deleted when the interpreter exits (before it frees objects).
_TIMERS: set[TimerTicker] = set()
# False in a child forked after a timer ticked (`forget_timers`).
_native = True


class Ticker(Protocol):
    """A running epoch ticker."""

    kind: str  # "timer" (no Python, no GIL) or "thread"

    def stop(self) -> None:
        """Tick no more."""


class _SigVal(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]


class _SigEvent(ctypes.Structure):
    """Linux's `struct sigevent` (64 bytes): the value, the signal, how to notify, and
    the thread notification's function and attributes inside a padded union."""

    _fields_ = [("sigev_value", _SigVal), ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int), ("sigev_notify_function", ctypes.c_void_p),
                ("sigev_notify_attributes", ctypes.c_void_p),
                ("_rest", ctypes.c_byte * 32)]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


@functools.cache
def _timer_functions() -> tuple[Any, Any, Any] | None:
    """libc's (or librt's) timer_create, timer_settime and timer_delete, typed; None
    where the platform has none. Looked up once: a forked child must not search for
    libraries (`find_library` runs a program) while it starts its tickers again."""
    if not sys.platform.startswith("linux"):
        return None
    for name in ("c", "rt"):
        found = ctypes.util.find_library(name)
        if found is None:
            continue
        try:
            lib = ctypes.CDLL(found, use_errno=True)
            create, settime, delete = lib.timer_create, lib.timer_settime, lib.timer_delete
        except (OSError, AttributeError):
            continue
        create.argtypes = [ctypes.c_int, ctypes.POINTER(_SigEvent), ctypes.c_void_p]
        create.restype = ctypes.c_int
        settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_ITimerSpec),
                            ctypes.c_void_p]
        settime.restype = ctypes.c_int
        delete.argtypes = [ctypes.c_void_p]
        delete.restype = ctypes.c_int
        return create, settime, delete
    return None


class TimerTicker:
    """A POSIX timer calling `wasmtime_engine_increment_epoch(engine)` every tick on a
    C library thread: `void f(union sigval)` receives the engine's address as the one
    pointer-sized argument the increment takes."""

    kind = "timer"

    def __init__(self, engine: wasmtime.Engine, timer: ctypes.c_void_p, delete: Any) -> None:
        # The wasm_engine_t the timer names is never freed: a tick handed to its thread
        # may still run after `timer_delete` returns, at the interpreter's exit too,
        # when every object left would be freed. One engine per configuration lives as
        # long as the process anyway (engine.shared_engine).
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
        self._engine = engine
        self._timer = timer
        self._delete = delete
        self._stopped = False
        _TIMERS.add(self)

    @classmethod
    def start(cls, engine: wasmtime.Engine) -> TimerTicker | None:
        """The running timer for `engine`, or None where none can be made."""
        functions = _timer_functions()
        if functions is None:
            return None
        create, settime, delete = functions
        from wasmtime import _ffi  # the C API as wasmtime-py loads it

        try:
            increment = ctypes.cast(_ffi.dll.wasmtime_engine_increment_epoch,
                                    ctypes.c_void_p).value
        except AttributeError:
            return None
        event = _SigEvent()
        event.sigev_notify = _SIGEV_THREAD
        event.sigev_notify_function = increment
        event.sigev_value.sival_ptr = ctypes.addressof(engine.ptr().contents)
        timer = ctypes.c_void_p()
        if create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
            return None
        every = _TimeSpec(0, TICK_MS * 1_000_000)
        if settime(timer, 0, ctypes.byref(_ITimerSpec(every, every)), None) != 0:
            delete(timer)
            return None
        return cls(engine, timer, delete)

    def stop(self) -> None:
        """Delete the timer (the engine stays: a tick may be under way)."""
        if not self._stopped:
            self._stopped = True
            self._delete(self._timer)
            _TIMERS.discard(self)


def forget_timers() -> None:
    """In a forked child: drop the parent's timers (a child inherits none: deleting
    their ids would name nothing, or another timer) and make no timer from now on.
    glibc's timer calls take a lock its timer thread holds while it hands a tick over,
    and a fork at that moment leaves the child's copy locked for good (a child's
    `timer_create` hung so, one fork in four)."""
    global _native
    _native = False
    for timer in list(_TIMERS):
        timer._stopped = True
    _TIMERS.clear()


@atexit.register
def _stop_timers() -> None:
    """No tick starts a C library thread while the interpreter shuts down."""
    for timer in list(_TIMERS):
        timer.stop()


class ThreadTicker(threading.Thread):
    """A daemon Python thread ticking (where no timer can be made): it needs the GIL at
    each tick."""

    kind = "thread"

    def __init__(self, engine: wasmtime.Engine) -> None:
        super().__init__(name="wasmext-epoch", daemon=True)
        self._engine = weakref.ref(engine)
        self._stop_event = threading.Event()

    def run(self) -> None:
        """Tick every TICK_MS until stopped or the engine is gone."""
        while not self._stop_event.wait(TICK_MS / 1000):
            engine = self._engine()
            if engine is None:
                return
            engine.increment_epoch()
            del engine

    def stop(self) -> None:
        """Tick no more."""
        self._stop_event.set()


def start_ticker(engine: wasmtime.Engine, *, native: bool = True) -> Ticker:
    """Tick `engine` every TICK_MS: a timer where the C library offers one (and
    `native`, and this process was not forked from one that ticked), else a Python
    thread."""
    if native and _native:
        timer = TimerTicker.start(engine)
        if timer is not None:
            return timer
    thread = ThreadTicker(engine)
    thread.start()
    return thread
