"""The cached-signature call path: the one place that touches wasmtime's C API.

wasmtime-py's `Func.__call__` asks the C API for the function's type, builds
`Val` objects and converts results on every call (~24 µs here). A plugin's
entry points have fixed signatures that the loader has already checked, so
this module binds each one once: a preallocated argument array, the function
pointer and the store context captured in a closure, and a direct call to
`wasmtime_func_call_unchecked`. The memory base pointer is read per call
because `memory.grow` may move it.

The raw symbols are private to wasmtime-py and checked against
`SUPPORTED_WASMTIME`. Outside that range, or when a symbol is missing, every
binding falls back to the public API (slower, same behaviour), and
`FAST_PATH` says which one is active. tests/test_fastcall.py pins both.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import wasmtime

log = logging.getLogger("wasmext.fastcall")

__all__ = [
    "FAST_PATH",
    "SUPPORTED_WASMTIME",
    "MemoryView",
    "bind_budget",
    "bind_func",
    "instance_exports",
]

SUPPORTED_WASMTIME = (50, 51)  # [low, high) major versions verified by the tests

Caller = Callable[..., int]


def _wasmtime_major() -> int:
    try:
        return int(version("wasmtime").split(".")[0])
    except Exception:  # pragma: no cover - broken install
        return -1


def _load_raw() -> Any:
    """Private function pointers with our own restypes, or None when unsupported."""
    major = _wasmtime_major()
    if not SUPPORTED_WASMTIME[0] <= major < SUPPORTED_WASMTIME[1]:
        log.warning("wasmtime %s is outside the verified range %s; using the slow call path",
                    major, SUPPORTED_WASMTIME)
        return None
    try:
        from wasmtime import _ffi as ffi

        dll = ffi.dll
        ctx_p = ctypes.POINTER(ffi.wasmtime_context_t)
        func_p = ctypes.POINTER(ffi.wasmtime_func_t)
        mem_p = ctypes.POINTER(ffi.wasmtime_memory_t)
        raw_p = ctypes.POINTER(ffi.wasmtime_val_raw_t)
        trap_pp = ctypes.POINTER(ctypes.POINTER(ffi.wasm_trap_t))
        # Fresh prototypes so that changing restype never alters wasmtime-py's own.
        call = ctypes.CFUNCTYPE(ctypes.c_void_p, ctx_p, func_p, raw_p, ctypes.c_size_t,
                                trap_pp)(("wasmtime_func_call_unchecked", dll))
        mem_data = ctypes.CFUNCTYPE(ctypes.c_void_p, ctx_p, mem_p)(("wasmtime_memory_data", dll))
        mem_size = ctypes.CFUNCTYPE(ctypes.c_size_t, ctx_p, mem_p)(
            ("wasmtime_memory_data_size", dll))
        return ffi, call, mem_data, mem_size
    except (AttributeError, ImportError) as exc:  # pragma: no cover - layout changed
        log.warning("wasmtime's raw bindings changed (%s); using the slow call path", exc)
        return None


_RAW = _load_raw()
FAST_PATH = _RAW is not None
_I32_SIGN = 1 << 31
_U32 = 1 << 32
_U64_MASK = (1 << 64) - 1


def _raise_failure(err: int | None, trap: Any, ffi: Any) -> None:
    """Turn a failed raw call into the exceptions the public API would raise."""
    from wasmtime import _func

    if err:
        error = wasmtime.WasmtimeError._from_ptr(ctypes.cast(err, ctypes.POINTER(
            ffi.wasmtime_error_t)))
        _func.maybe_raise_last_exn()
        raise error
    trap_obj = wasmtime.Trap._from_ptr(trap)
    _func.maybe_raise_last_exn()
    raise trap_obj


def bind_func(store: wasmtime.Store, func: Any, nparams: int, has_result: bool) -> Caller:
    """A caller for `func` (as `instance_exports` returned it) taking `nparams` i32
    arguments and returning its integer result unsigned (0 if it has none).
    Traps raise `wasmtime.Trap`, as the public API does."""
    if _RAW is None:
        return _bind_public(store, func, has_result)
    ffi, call, _, _ = _RAW
    ctx = store._context()
    pfn = ctypes.byref(func)
    slots = max(nparams, 1 if has_result else 0)
    args = (ffi.wasmtime_val_raw_t * max(slots, 1))()
    trap_t = ctypes.POINTER(ffi.wasm_trap_t)

    def invoke(*params: int) -> int:
        for i, p in enumerate(params):
            args[i].i32 = p - _U32 if p >= _I32_SIGN else p
        trap = trap_t()
        err = call(ctx, pfn, args, slots, ctypes.byref(trap))
        if err or trap:
            _raise_failure(err, trap, ffi)
        return int(args[0].i64) & _U64_MASK if has_result else 0

    def invoke2(a: int, b: int) -> int:
        # The hot path (wasmext_call): two i32 in, one i64 out, nothing generic.
        args[0].i32 = a - _U32 if a >= _I32_SIGN else a
        args[1].i32 = b - _U32 if b >= _I32_SIGN else b
        trap = trap_t()
        err = call(ctx, pfn, args, 2, ctypes.byref(trap))
        if err or trap:
            _raise_failure(err, trap, ffi)
        return int(args[0].i64) & _U64_MASK

    return invoke2 if nparams == 2 and has_result else invoke


def _bind_public(store: wasmtime.Store, func: wasmtime.Func, has_result: bool) -> Caller:
    def invoke(*params: int) -> int:
        signed = [p - _U32 if p >= _I32_SIGN else p for p in params]
        result = func(store, *signed)
        if not has_result:
            return 0
        return int(result) & _U64_MASK

    return invoke


def instance_exports(store: wasmtime.Store, instance: wasmtime.Instance,
                     names: list[str]) -> dict[str, Any]:
    """The named exports without wrapping every export of the instance.

    Callers pass only names the module is known to export.
    """
    if _RAW is None:
        exports = instance.exports(store)
        return {n: exports[n] for n in names}
    ffi = _RAW[0]
    export_get = _EXPORT_GET
    ctx = store._context()
    pinst = ctypes.byref(instance._instance)
    found: dict[str, Any] = {}
    for name in names:
        raw = name.encode()
        item = ffi.wasmtime_extern_t()
        if not export_get(ctx, pinst, raw, len(raw), ctypes.byref(item)):
            raise KeyError(name)
        # Functions stay raw structs: bind_func needs nothing else.
        found[name] = item.of.memory if item.kind == _KIND_MEMORY else item.of.func
    return found


if _RAW is not None:
    from wasmtime import _bindings as _b

    _EXPORT_GET = _b._wasmtime_instance_export_get
    _KIND_MEMORY = _RAW[0].WASMTIME_EXTERN_MEMORY.value


class MemoryView:
    """Bounds-checked access to one instance's linear memory.

    The engine is configured with `memory_may_move = False`, so the base
    address is read once; only the size changes (memory never shrinks).
    """

    def __init__(self, store: wasmtime.Store, memory: Any) -> None:
        if _RAW is not None:
            _, _, mem_data, mem_size = _RAW
            ctx = store._context()
            pmem = ctypes.byref(memory)
            self.base = int(mem_data(ctx, pmem) or 0)
            self.size: Callable[[], int] = lambda: int(mem_size(ctx, pmem))
        else:
            self.base = ctypes.addressof(memory.data_ptr(store).contents)
            self.size = lambda: memory.data_len(store)
        self.last_size = self.size()

    last_size = 0  # the size seen by the latest read(): lets a fault tell if memory grew

    def read(self, ptr: int, length: int) -> bytes | None:
        """Copy [ptr, ptr+length) out, or None when it is not inside memory."""
        self.last_size = size = self.size()
        if ptr + length > size:
            return None
        return ctypes.string_at(self.base + ptr, length)

    def write(self, ptr: int, data: bytes) -> bool:
        """Copy `data` in at `ptr`; False (and nothing written) when it does not fit."""
        if ptr + len(data) > self.size():
            return False
        ctypes.memmove(self.base + ptr, data, len(data))
        return True

    def write_unchecked(self, ptr: int, data: bytes) -> None:
        """Copy into a region already validated (memory never shrinks)."""
        ctypes.memmove(self.base + ptr, data, len(data))


def bind_budget(store: wasmtime.Store) -> Callable[[int, int], None]:
    """A setter for (fuel, epoch ticks) of `store`, refreshed before every call."""
    if _RAW is None:
        def set_public(fuel: int, ticks: int) -> None:
            store.set_fuel(fuel)
            store.set_epoch_deadline(ticks)
        return set_public
    from wasmtime import _bindings

    ctx = store._context()
    set_fuel = _bindings._wasmtime_context_set_fuel
    set_deadline = _bindings._wasmtime_context_set_epoch_deadline

    def set_raw(fuel: int, ticks: int) -> None:
        # set_fuel only fails when fuel is disabled, which SharedEngine never does.
        set_fuel(ctx, fuel)
        set_deadline(ctx, ticks)

    return set_raw
