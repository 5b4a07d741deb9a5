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
    """Private function pointers taking plain addresses, or None when unsupported.

    The entry that runs guest code releases the GIL (the epoch ticker must run
    while a guest spins); the bookkeeping entries are PYFUNCTYPE, which keeps
    the GIL, because they return in nanoseconds and the hand-off costs more.
    """
    major = _wasmtime_major()
    if not SUPPORTED_WASMTIME[0] <= major < SUPPORTED_WASMTIME[1]:
        log.warning("wasmtime %s is outside the verified range %s; using the slow call path",
                    major, SUPPORTED_WASMTIME)
        return None
    try:
        from wasmtime import _ffi as ffi

        dll = ffi.dll
        vp, u64 = ctypes.c_void_p, ctypes.c_uint64
        # Fresh prototypes so that nothing here alters wasmtime-py's own.
        call = ctypes.CFUNCTYPE(vp, vp, vp, vp, ctypes.c_size_t, vp)(
            ("wasmtime_func_call_unchecked", dll))
        mem_data = ctypes.PYFUNCTYPE(vp, vp, vp)(("wasmtime_memory_data", dll))
        mem_size = ctypes.PYFUNCTYPE(ctypes.c_size_t, vp, vp)(("wasmtime_memory_data_size", dll))
        set_fuel = ctypes.PYFUNCTYPE(vp, vp, u64)(("wasmtime_context_set_fuel", dll))
        set_deadline = ctypes.PYFUNCTYPE(None, vp, u64)(
            ("wasmtime_context_set_epoch_deadline", dll))
        return ffi, call, mem_data, mem_size, set_fuel, set_deadline
    except (AttributeError, ImportError) as exc:  # pragma: no cover - layout changed
        log.warning("wasmtime's raw bindings changed (%s); using the slow call path", exc)
        return None


def _addr(obj: Any) -> int:
    """The address of a ctypes object or of what a ctypes pointer points to."""
    if isinstance(obj, ctypes._Pointer):
        return ctypes.cast(obj, ctypes.c_void_p).value or 0
    return ctypes.addressof(obj)


_RAW = _load_raw()
FAST_PATH = _RAW is not None
_U64_MASK = (1 << 64) - 1
_WASM32_SPAN = 1 << 32


def _raise_failure(err: int | None, trap: int | None, ffi: Any) -> None:
    """Turn a failed raw call into the exceptions the public API would raise."""
    from wasmtime import _func

    if err:
        error = wasmtime.WasmtimeError._from_ptr(ctypes.cast(err, ctypes.POINTER(
            ffi.wasmtime_error_t)))
        _func.maybe_raise_last_exn()
        raise error
    trap_obj = wasmtime.Trap._from_ptr(ctypes.cast(trap or 0, ctypes.POINTER(ffi.wasm_trap_t)))
    _func.maybe_raise_last_exn()
    raise trap_obj


def bind_func(store: wasmtime.Store, func: Any, nparams: int, has_result: bool) -> Caller:
    """A caller for `func` (as `instance_exports` returned it) taking `nparams` i32
    arguments and returning its integer result unsigned (0 if it has none).
    Traps raise `wasmtime.Trap`, as the public API does."""
    if _RAW is None:
        return _bind_public(store, func, has_result)
    ffi, call = _RAW[0], _RAW[1]
    ctx = _addr(store._context())
    fn = _addr(func)
    slots = max(nparams, 1)
    args = (ffi.wasmtime_val_raw_t * slots)()
    # Unsigned views of the same bytes: a raw value is 16 bytes, little-endian.
    u32 = (ctypes.c_uint32 * (slots * 4)).from_buffer(args)
    u64 = (ctypes.c_uint64 * (slots * 2)).from_buffer(args)
    pargs = ctypes.addressof(args)
    trap = ctypes.c_void_p()
    ptrap = ctypes.addressof(trap)

    def invoke(*params: int) -> int:
        for i, p in enumerate(params):
            u32[i * 4] = p
        err = call(ctx, fn, pargs, slots, ptrap)
        if err or trap.value:
            caught, trap.value = trap.value, None
            _raise_failure(err, caught, ffi)
        return int(u64[0]) if has_result else 0

    def invoke2(a: int, b: int) -> int:
        # The hot path (wasmext_call): two i32 in, one i64 out, nothing generic.
        u32[0] = a
        u32[4] = b
        err = call(ctx, fn, pargs, 2, ptrap)
        if err or trap.value:
            caught, trap.value = trap.value, None
            _raise_failure(err, caught, ffi)
        return int(u64[0])

    # The closures keep `args` (and so both views) alive.
    invoke.__dict__["_keep"] = invoke2.__dict__["_keep"] = (args, func, store)
    return invoke2 if nparams == 2 and has_result else invoke


def _bind_public(store: wasmtime.Store, func: wasmtime.Func, has_result: bool) -> Caller:
    def invoke(*params: int) -> int:
        signed = [p - (1 << 32) if p >= 1 << 31 else p for p in params]
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
    export_get = _EXPORT_GET
    ctx = store._context()
    pinst = ctypes.byref(instance._instance)
    found: dict[str, Any] = {}
    for name in names:
        raw = name.encode()
        item = _RAW[0].wasmtime_extern_t()
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
    address is read once; only the size changes (memory never shrinks). Bytes
    move through a memoryview spanning the whole 4 GiB wasm32 address space
    (nothing is touched until a checked slice is), which costs no foreign call.
    """

    def __init__(self, store: wasmtime.Store, memory: Any) -> None:
        if _RAW is not None:
            mem_data, mem_size = _RAW[2], _RAW[3]
            ctx, pmem = _addr(store._context()), _addr(memory)
            self.base = int(mem_data(ctx, pmem) or 0)
            self.size: Callable[[], int] = lambda: int(mem_size(ctx, pmem))
            self._keep = (store, memory)
        else:
            self.base = ctypes.addressof(memory.data_ptr(store).contents)
            self.size = lambda: memory.data_len(store)
        span = (ctypes.c_ubyte * _WASM32_SPAN).from_address(self.base)
        self._view = memoryview(span).cast("B")
        self.last_size = self.size()

    last_size = 0  # the size seen by the latest read(): lets a fault tell if memory grew

    def read(self, ptr: int, length: int) -> bytes | None:
        """Copy [ptr, ptr+length) out, or None when it is not inside memory."""
        self.last_size = size = self.size()
        if ptr + length > size:
            return None
        return self._view[ptr:ptr + length].tobytes()

    def write(self, ptr: int, data: bytes) -> bool:
        """Copy `data` in at `ptr`; False (and nothing written) when it does not fit."""
        if ptr + len(data) > self.size():
            return False
        self._view[ptr:ptr + len(data)] = data
        return True

    def write_unchecked(self, ptr: int, data: bytes) -> None:
        """Copy into a region already validated (memory never shrinks)."""
        self._view[ptr:ptr + len(data)] = data


def bind_budget(store: wasmtime.Store) -> Callable[[int, int], None]:
    """A setter for (fuel, epoch ticks) of `store`, refreshed before every call."""
    if _RAW is None:
        def set_public(fuel: int, ticks: int) -> None:
            store.set_fuel(fuel)
            store.set_epoch_deadline(ticks)
        return set_public
    set_fuel, set_deadline = _RAW[4], _RAW[5]
    ctx = _addr(store._context())

    def set_raw(fuel: int, ticks: int) -> None:
        # set_fuel only fails when fuel is disabled, which SharedEngine never does.
        set_fuel(ctx, fuel)
        set_deadline(ctx, ticks)

    return set_raw
