"""The imports every plugin is linked against, one Linker per engine.

wasmtime calls these functions with no pointer back to our Python objects, so
the instance that is running opens its call-tree frame (`calltree.enter`, which
records the instance as the frame's `guest`) before it enters the guest; a host
call always belongs to the top of that per-thread stack (calls are synchronous,
and a nested call into another plugin pushes again). One stack serves both the
budgets and this lookup, so a call pays for one thread-local push, not two.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

import wasmtime

from wasmext.sandbox import calltree, hosttramp, wasi

if TYPE_CHECKING:
    from wasmext.sandbox.engine import SharedEngine

__all__ = ["GuestSide", "linker_for"]


class GuestSide(wasi.WasiGuest, Protocol):
    """What an instance offers the import functions."""

    def on_host_call(self, ptr: int, length: int) -> int:
        """Serve the guest's host call of the request at ptr; the answer's ptr and length."""
        ...

    def on_log(self, level: int, ptr: int, length: int) -> None:
        """Keep the guest's log line at ptr."""
        ...


_tree = calltree._tree  # the per-thread frame stack, read directly on the hot path


def _host_call(ptr: int, length: int) -> int:
    guest: GuestSide = _tree.stack[-1].guest  # type: ignore[union-attr]
    packed = guest.on_host_call(ptr & 0xFFFFFFFF, length & 0xFFFFFFFF)
    # The i64 result as a signed value (what both trampolines write back), signed
    # here rather than in a wrapper: one Python frame less per host call.
    return packed - (1 << 64) if packed >= 1 << 63 else packed


def _log(level: int, ptr: int, length: int) -> None:
    guest: GuestSide = _tree.stack[-1].guest  # type: ignore[union-attr]
    guest.on_log(level, ptr & 0xFFFFFFFF, length & 0xFFFFFFFF)


def _top() -> GuestSide:
    return _tree.stack[-1].guest  # type: ignore[union-attr,no-any-return]


_FAST = True  # tests switch the fast trampoline off to pin the public-API path
# WASI through the fast trampoline (i64 arguments, errno results) is new and off until a
# process crash seen once in a test run is ruled out: WASI takes the public API.
_FAST_WASI = False
_linkers: weakref.WeakKeyDictionary[Any, wasmtime.Linker] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def linker_for(engine: SharedEngine) -> wasmtime.Linker:
    """The Linker with the host's own WASI (`sandbox.wasi`) and the wasmext imports."""
    with _lock:
        linker = _linkers.get(engine)
        if linker is None:
            i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
            linker = wasmtime.Linker(engine.engine)
            wasi.define(linker, _top, _FAST and _FAST_WASI)
            for name, ty, fn in (("host_call", wasmtime.FuncType([i32, i32], [i64]),
                                  _host_call),
                                 ("log", wasmtime.FuncType([i32, i32, i32], []), _log)):
                # The cached trampoline when this wasmtime is trusted, else the public API.
                if _FAST and name == "host_call" and hosttramp.define_guest_method(
                        linker, "wasmext", name, ty, "on_host_call"):
                    continue
                if not (_FAST and hosttramp.define(linker, "wasmext", name, ty, fn)):
                    hosttramp.define_public(linker, "wasmext", name, ty, fn)
            _linkers[engine] = linker
        return linker
