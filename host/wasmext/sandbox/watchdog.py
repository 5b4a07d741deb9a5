"""The epoch-deadline watchdog: a guest spinning in a loop sees its deadline move.

Compiled code checks the engine's epoch at every function entry and loop
back-edge, but against a copy of the store's deadline that it loads at
function entry and reloads only once the epoch reaches that copy. So when a
store's deadline is the whole `timeout_ms` away, moving it from another thread
(`CallScope.cancel` does, and moves the call tree's deadline to the past) only
reaches a guest that spins inside one function (`loop br 0`) at the old
deadline: the cancelled call ran on until its own time-out.

A watched store's deadline is one epoch tick away instead, and wasmtime calls
`_on_deadline` when the epoch reaches it (never between calls). The callback
reads the call tree's deadline (the innermost frame on this thread is the
running guest's): passed, the call ends with the guest's `Timeout`, or
`Cancelled` when its call scope was cancelled (faults.timeout decides).
Otherwise the deadline moves on: to the call's own deadline when nothing can
cancel the call, or `CANCEL_CHECK_TICKS` on when a call scope is bound to the
thread (an MCP `tools/call`), so that a cancel is seen within that many ticks.
The callback needs the GIL: a long call pays a few microseconds per check,
and up to the interpreter's switch interval while a busy Python thread holds
the GIL; so calls that cannot be cancelled are checked only at their deadline
(and once at their first tick), and cancellable ones every 20 ms, not every tick.

The store callback is a private C-API symbol of wasmtime-py (as in fastcall and
hosttramp) with no public counterpart: when it is missing or `fastcall` does
not trust this wasmtime, `watch` answers False and the instance keeps the
whole `timeout_ms` as its epoch deadline (a spinning guest then sees a cancel
only at its next function entry or host call). `WATCHDOG` says which is active.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import wasmtime

from wasmext.sandbox import callscope, calltree, fastcall
from wasmext.sandbox.engine import TICK_MS, SharedEngine

log = logging.getLogger("wasmext.sandbox.watchdog")

__all__ = ["CANCEL_CHECK_TICKS", "WATCHDOG", "unwatched", "watch"]

CANCEL_CHECK_TICKS = max(1, 20 // TICK_MS)  # a cancellable call's deadline is read this often
_CONTINUE = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE: go on (YIELD is for async stores)
_NO_CALL = b"wasmext: guest code ran outside a plugin call"
_PAST = b"wasmext: the call's deadline passed"

# wasmtime_error_t *callback(wasmtime_context_t *, void *data, uint64_t *delta,
#                            wasmtime_update_deadline_kind_t *kind)
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)


def _load() -> tuple[Any, Any] | None:
    if not fastcall.FAST_PATH:
        return None
    try:
        from wasmtime import _ffi as ffi

        vp = ctypes.c_void_p
        # Fresh prototypes taking plain addresses; nothing of wasmtime-py's is altered.
        # It only stores the callback: keeping the GIL is cheaper than handing it off.
        # Untyped: its arguments go as the ctypes objects they are (a store handle,
        # the callback, NULLs), with no converter call each (fastcall.untyped).
        install = ctypes.PYFUNCTYPE(None)(("wasmtime_store_epoch_deadline_callback", ffi.dll))
        install.argtypes = None  # type: ignore[assignment]  # ctypes takes None
        error_new = ctypes.PYFUNCTYPE(vp, ctypes.c_char_p)(("wasmtime_error_new", ffi.dll))
    except (AttributeError, ImportError) as exc:  # pragma: no cover - layout changed
        log.warning("wasmtime's epoch-deadline callback is unavailable (%s); a spinning "
                    "guest sees a cancel only at its time-out or next call", exc)
        return None
    return install, error_new


_RAW = _load()
WATCHDOG = _RAW is not None
_off = 0  # > 0 inside `unwatched()`


def _stop(message: bytes) -> int:
    """An error for wasmtime to end the guest with (it takes ownership)."""
    assert _RAW is not None
    return int(_RAW[1](message) or 0)


def _on_deadline(context: int, data: int, delta: int, kind: int) -> int:
    try:
        frame = calltree.current()
        if frame is None:  # fail closed: nothing bounds this code
            return _stop(_NO_CALL)
        left_ms = (frame.deadline - time.monotonic()) * 1000
        if left_ms > 0:
            ticks = SharedEngine.ticks_for(int(left_ms))
            if callscope.current() is not None:  # a cancel may move the deadline any time
                ticks = min(ticks, CANCEL_CHECK_TICKS)
            ctypes.c_uint64.from_address(delta).value = ticks
            ctypes.c_uint8.from_address(kind).value = _CONTINUE
            return 0
        guest = frame.guest
        if guest is not None:
            # Records the named error as the call's abort; raising is how it does that.
            with contextlib.suppress(Exception):
                guest.wasi_timeout("the guest")
        return _stop(_PAST)
    except BaseException:  # an exception must not cross into wasmtime: stop the guest
        log.debug("the deadline check failed", exc_info=True)
        return _stop(_PAST)


_CALLBACK_FN = _CALLBACK(_on_deadline)  # one for every store: it lives as long as the process


def watch(store: wasmtime.Store) -> bool:
    """Check `store`'s deadline each tick while its guest runs; False: not available.

    A watched store's epoch deadline is set to one tick before each call (and after
    anything that moves the call tree's deadline): the first check decides the next.
    """
    if _RAW is None or _off:
        return False
    # addressof, not ctypes.cast: a cast ties the store's pointer object into a cycle
    # that outlives the store until the garbage collector's next pass.
    _RAW[0](fastcall.store_handle(store), _CALLBACK_FN, None, None)
    return True


@contextmanager
def unwatched() -> Iterator[None]:
    """Stores created in the block go without the watchdog, as when wasmtime lacks it
    (for the tests of that path and the benchmark that prices the watchdog)."""
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1
