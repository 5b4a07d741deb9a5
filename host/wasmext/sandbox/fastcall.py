"""The cached-signature call path: the one place that touches wasmtime's C API.

wasmtime-py's `Func.__call__` asks the C API for the function's type, builds
`Val` objects and converts results on every call. A plugin's
entry points have fixed signatures that the loader has already checked, so
`StoreBinding` binds each one once: a preallocated argument array, the
function and store addresses captured in a closure, and a direct call to
`wasmtime_func_call_unchecked`. Memory is read and written through a
memoryview over the guest's address space (its base never moves: the engine
sets `memory_may_move = False`).

A host function's exception travels back to the call that failed through a
per-thread slot (`keep_host_exception`), never through wasmtime-py's
process-wide `LAST_EXCEPTION`: with guests on several threads, another
thread's failed call took an error that was not its own (another plugin's
message included) from that global.

The raw symbols are private to wasmtime-py and checked against
`SUPPORTED_WASMTIME`. Outside that range, or when a symbol is missing, every
binding falls back to the public API (slower, same behaviour), and
`FAST_PATH` says which one is active. tests/test_fastcall.py pins both.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from functools import partial
from importlib.metadata import version
from typing import Any

import wasmtime

log = logging.getLogger("wasmext.sandbox.fastcall")

__all__ = ["FAST_PATH", "SUPPORTED_WASMTIME", "Caller", "MemoryView", "StoreBinding",
           "budget_setter", "host_failure_standin", "keep_host_exception", "new_store",
           "take_host_exception"]

SUPPORTED_WASMTIME = (50, 51)  # [low, high) major versions verified by the tests
WASM32_SPAN = 1 << 32

Caller = Callable[..., int]


def _wasmtime_major() -> int:
    try:
        return int(version("wasmtime").split(".")[0])
    except Exception:  # pragma: no cover - broken install
        return -1


class _Raw:
    """Private function pointers taking plain addresses.

    The entry that runs guest code releases the GIL (the epoch ticker must run
    while a guest spins); the bookkeeping entries are PYFUNCTYPE, which keeps
    the GIL, because they return in nanoseconds and the hand-off costs more.
    Fresh prototypes, so nothing here alters wasmtime-py's own.
    """

    def __init__(self) -> None:
        from wasmtime import _bindings
        from wasmtime import _ffi as ffi

        dll = ffi.dll
        vp, u64 = ctypes.c_void_p, ctypes.c_uint64
        self.ffi = ffi
        self.call = ctypes.CFUNCTYPE(vp, vp, vp, vp, ctypes.c_size_t, vp)(
            ("wasmtime_func_call_unchecked", dll))
        self.mem_data = ctypes.PYFUNCTYPE(vp, vp, vp)(("wasmtime_memory_data", dll))
        self.mem_size = ctypes.PYFUNCTYPE(ctypes.c_size_t, vp, vp)(
            ("wasmtime_memory_data_size", dll))
        self.set_fuel = ctypes.PYFUNCTYPE(vp, vp, u64)(("wasmtime_context_set_fuel", dll))
        self.set_deadline = ctypes.PYFUNCTYPE(None, vp, u64)(
            ("wasmtime_context_set_epoch_deadline", dll))
        self.get_fuel = ctypes.PYFUNCTYPE(vp, vp, vp)(("wasmtime_context_get_fuel", dll))
        self.export_get = _bindings._wasmtime_instance_export_get
        self.kind_memory = ffi.WASMTIME_EXTERN_MEMORY.value
        # What starting an instance calls: plain-address prototypes skip the argument
        # type checks of wasmtime-py's. Instantiation runs the guest's start function,
        # so it releases the GIL like `call`.
        self.export_by_name = ctypes.PYFUNCTYPE(ctypes.c_bool, vp, vp, ctypes.c_char_p,
                                                ctypes.c_size_t, vp)(
            ("wasmtime_instance_export_get", dll))
        self.pre_instantiate = ctypes.CFUNCTYPE(vp, vp, vp, vp, vp)(
            ("wasmtime_instance_pre_instantiate", dll))
        i64 = ctypes.c_int64
        self.limiter = ctypes.PYFUNCTYPE(None, vp, i64, i64, i64, i64, i64)(
            ("wasmtime_store_limiter", dll))
        # wasmtime-py's own typed entries, without its Python wrapper functions.
        self.store_new = _bindings._wasmtime_store_new
        self.store_context = _bindings._wasmtime_store_context
        self.no_finalizer = ctypes.cast(0, ctypes.CFUNCTYPE(None, vp))


def _load_raw() -> _Raw | None:
    major = _wasmtime_major()
    if not SUPPORTED_WASMTIME[0] <= major < SUPPORTED_WASMTIME[1]:
        log.warning("wasmtime %s is outside the verified range %s; using the slow call path",
                    major, SUPPORTED_WASMTIME)
        return None
    try:
        return _Raw()
    except (AttributeError, ImportError) as exc:  # pragma: no cover - layout changed
        log.warning("wasmtime's raw bindings changed (%s); using the slow call path", exc)
        return None


_RAW = _load_raw()
FAST_PATH = _RAW is not None


class _Caught(threading.local):
    exc: BaseException | None = None
    standin: BaseException | None = None


_caught = _Caught()


def keep_host_exception(exc: BaseException) -> None:
    """Hold `exc`, raised by a host function on this thread, for its failed call."""
    _caught.exc = exc


def host_failure_standin() -> BaseException:
    """A message-free exception for wasmtime-py's trampoline to put in its global in
    place of the real one (`take_host_exception` removes it again)."""
    standin = _caught.standin = RuntimeError("a host function failed")
    return standin


def take_host_exception() -> BaseException | None:
    """The exception a host function raised on this thread since the last take (once)."""
    exc, standin = _caught.exc, _caught.standin
    if standin is not None:
        from wasmtime import _func

        _caught.standin = None
        if _func.LAST_EXCEPTION is standin:  # else a public call already took it
            _func.LAST_EXCEPTION = None
    if exc is not None:
        _caught.exc = None
    return exc


def _raise_failure(raw: _Raw, err: int | None, trap: int | None) -> None:
    """Turn a failed raw call into the exception the host function raised on this
    thread, else the wasmtime error or trap."""
    failure: Exception
    if err:
        failure = wasmtime.WasmtimeError._from_ptr(
            ctypes.cast(err, ctypes.POINTER(raw.ffi.wasmtime_error_t)))
    else:
        failure = wasmtime.Trap._from_ptr(
            ctypes.cast(trap or 0, ctypes.POINTER(raw.ffi.wasm_trap_t)))
    caught = take_host_exception()
    if caught is not None:
        raise caught
    raise failure


def new_store(engine: wasmtime.Engine) -> wasmtime.Store:
    """A `wasmtime.Store` of `engine` without user data, as `wasmtime.Store(engine)`
    makes it, minus the checks and wrappers around its two foreign calls."""
    raw = _RAW
    if raw is None:
        return wasmtime.Store(engine)
    store: wasmtime.Store = wasmtime.Store.__new__(wasmtime.Store)
    ptr = raw.store_new(engine.ptr(), None, raw.no_finalizer)
    # The attributes `Store.__init__` sets (name-mangled: `Managed.__ptr`,
    # `Store.__context`); tests/sandbox/test_fastcall.py pins them on this wasmtime.
    store._Managed__ptr = ptr  # type: ignore[attr-defined]
    store._Store__context = raw.store_context(ptr)  # type: ignore[attr-defined]
    store.engine = engine
    return store


class MemoryView:
    """Bounds-checked access to one instance's linear memory.

    The base address is read once; only the size changes (memory never
    shrinks). Bytes move through a memoryview spanning the whole wasm32 address
    space: nothing outside a checked slice is ever touched, and a slice copy
    costs no foreign call.
    """

    def __init__(self, base: int, size: Callable[[], int]) -> None:
        self.base = base
        self.size = size
        span = (ctypes.c_ubyte * WASM32_SPAN).from_address(base)
        self._view = memoryview(span).cast("B")
        # The same view for a hot path that checks `known` itself (one frame less per
        # host call): only ever sliced below `known`.
        self.view = self._view
        self.last_size = size()  # as of the latest read(): lets a fault tell if memory grew
        # A size memory has reached: it never shrinks, so a region inside it is inside
        # memory without asking wasmtime again (a foreign call costs more than the copy).
        self.known = self.last_size

    def read(self, ptr: int, length: int) -> bytes | None:
        """Copy [ptr, ptr+length) out, or None when it is not inside memory."""
        self.last_size = self.known = size = self.size()
        if ptr + length > size:
            return None
        return self._view[ptr:ptr + length].tobytes()

    def read_guest(self, ptr: int, length: int) -> bytes | None:
        """`read` for an import's argument (host_call request, log text): memory is
        asked its size only when the region is past the size already known, and
        `last_size` (a hook call's own reads) is left alone."""
        end = ptr + length
        if end > self.known:
            self.known = self.size()
            if end > self.known:
                return None
        return self._view[ptr:end].tobytes()

    def write(self, ptr: int, data: bytes) -> bool:
        """Copy `data` in at `ptr`; False (and nothing written) when it does not fit."""
        end = ptr + len(data)
        if end > self.known:
            self.known = self.size()
            if end > self.known:
                return False
        self._view[ptr:end] = data
        return True

    def write_unchecked(self, ptr: int, data: bytes) -> None:
        """Copy into a region already validated (memory never shrinks)."""
        self._view[ptr:ptr + len(data)] = data


def budget_setter(store: wasmtime.Store) -> Callable[[int, int], None]:
    """A setter for `store`'s (fuel, epoch ticks), refreshed before every call: two raw
    calls where the raw entries are loaded (a core module's or a component's store)."""
    raw = _RAW
    if raw is None:
        def set_public(fuel: int, ticks: int) -> None:
            store.set_fuel(fuel)
            store.set_epoch_deadline(ticks)
        return set_public
    set_fuel, set_deadline = raw.set_fuel, raw.set_deadline
    ctx = ctypes.addressof(store._context().contents)

    def set_raw(fuel: int, ticks: int) -> None:
        # set_fuel fails only when fuel is disabled, which SharedEngine never does.
        set_fuel(ctx, fuel)
        set_deadline(ctx, ticks)
    set_raw.__dict__["_keep"] = store  # the context lives as long as its store
    return set_raw


class StoreBinding:
    """Fast entry points into one instance in one store.

    Made with an instance, or with none and then `limit` and `instantiate`: starting
    an instance this way costs no wasmtime-py wrapper objects beyond the Instance.
    """

    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance | None = None) -> None:
        self.store = store
        self._raw = _RAW
        ctx = store._context()
        self._ctx_ptr = ctx
        self._ctx = ctypes.addressof(ctx.contents)
        self._once: tuple[Any, ...] | None = None  # `call_once`'s extern, args, trap, addresses
        if instance is not None:
            self._adopt(instance)

    def _adopt(self, instance: wasmtime.Instance) -> None:
        self.instance = instance
        self._instance = ctypes.addressof(instance._instance)

    def limit(self, memory_size: int, table_elements: int, instances: int, tables: int,
              memories: int) -> None:
        """The store's resource limits (`wasmtime.Store.set_limits`)."""
        raw = self._raw
        if raw is None:
            self.store.set_limits(memory_size=memory_size, table_elements=table_elements,
                                  instances=instances, tables=tables, memories=memories)
            return
        # addressof, not ctypes.cast: a cast ties the pointer object into a cycle.
        raw.limiter(ctypes.addressof(self.store.ptr().contents), memory_size, table_elements,
                    instances, tables, memories)

    def instantiate(self, pre: wasmtime.InstancePre) -> None:
        """Start `pre`'s instance in the store. A failure raises the exception a host
        function raised on this thread, else the wasmtime error or the trap."""
        raw = self._raw
        if raw is None:
            self._adopt(pre.instantiate(self.store))
            return
        instance = raw.ffi.wasmtime_instance_t()
        trap = ctypes.c_void_p()
        err = raw.pre_instantiate(ctypes.addressof(pre.ptr().contents), self._ctx,
                                  ctypes.addressof(instance), ctypes.addressof(trap))
        if err or trap.value:
            _raise_failure(raw, err, trap.value)
        self._adopt(wasmtime.Instance._from_raw(instance))

    def _export(self, name: str) -> Any:
        raw = self._raw
        if raw is None:
            return self.instance.exports(self.store).get(name)
        key = name.encode()
        item = raw.ffi.wasmtime_extern_t()
        if not raw.export_by_name(self._ctx, self._instance, key, len(key),
                                  ctypes.addressof(item)):
            return None
        return item.of.memory if item.kind == raw.kind_memory else item.of.func

    def has(self, name: str) -> bool:
        """Whether the instance exports the name."""
        return self._export(name) is not None

    def memory(self, name: str = "memory") -> MemoryView:
        """A view of the exported memory, read and written in place."""
        mem = self._export(name)
        raw = self._raw
        if raw is None:
            store = self.store
            return MemoryView(ctypes.addressof(mem.data_ptr(store).contents),
                              lambda: int(mem.data_len(store)))
        ctx, pmem = self._ctx, ctypes.addressof(mem)
        view = MemoryView(int(raw.mem_data(ctx, pmem) or 0), partial(raw.mem_size, ctx, pmem))
        view.__dict__["_keep"] = (mem, self.store)
        return view

    def budget(self) -> Callable[[int, int], None]:
        """A setter for (fuel, epoch ticks), refreshed before every call."""
        return budget_setter(self.store)

    def fuel_left(self) -> Callable[[], int]:
        """A reader of the fuel the store has left (for metering a call)."""
        raw = self._raw
        if raw is None:
            store = self.store
            return lambda: int(store.get_fuel())
        get_fuel, ctx = raw.get_fuel, self._ctx
        out = ctypes.c_uint64()
        pout = ctypes.addressof(out)

        def read() -> int:
            get_fuel(ctx, pout)
            return int(out.value)
        return read

    def func(self, name: str, nparams: int, has_result: bool) -> Caller:
        """A caller for export `name` taking `nparams` u32 arguments and returning
        its integer result unsigned (0 if it has none). Traps raise
        `wasmtime.Trap`, as the public API does."""
        func = self._export(name)
        if func is None:
            raise KeyError(name)
        raw = self._raw
        if raw is None:
            return _bind_public(self.store, func, has_result)
        call, ctx, fn = raw.call, self._ctx, ctypes.addressof(func)
        slots = max(nparams, 1)
        # wasmtime_val_raw_t is a 16-byte little-endian union: four u32 per
        # slot; an i64 result is the first two.
        u32 = (ctypes.c_uint32 * (slots * 4))()
        pargs = ctypes.addressof(u32)
        trap = ctypes.c_void_p()
        ptrap = ctypes.addressof(trap)

        def invoke(*params: int) -> int:
            for i, p in enumerate(params):
                u32[i * 4] = p
            err = call(ctx, fn, pargs, slots, ptrap)
            if err or trap.value:
                caught, trap.value = trap.value, None
                _raise_failure(raw, err, caught)
            return u32[0] | u32[1] << 32 if has_result else 0

        def invoke2(a: int, b: int) -> int:
            # The hot path (wasmext_call): two i32 in, one i64 out, nothing generic.
            u32[0] = a
            u32[4] = b
            err = call(ctx, fn, pargs, 2, ptrap)
            if err or trap.value:
                caught, trap.value = trap.value, None
                _raise_failure(raw, err, caught)
            return u32[0] | u32[1] << 32

        def invoke1(a: int) -> int:
            # wasmext_alloc, once per host call's answer.
            u32[0] = a
            err = call(ctx, fn, pargs, 1, ptrap)
            if err or trap.value:
                caught, trap.value = trap.value, None
                _raise_failure(raw, err, caught)
            return u32[0] | u32[1] << 32

        chosen = invoke2 if nparams == 2 and has_result else \
            invoke1 if nparams == 1 and has_result else invoke
        chosen.__dict__["_keep"] = (func, self.store)  # the addresses must stay valid
        return chosen

    def call_once(self, name: str, has_result: bool, *params: int) -> int:
        """Call export `name` with u32 `params` as `func(...)` would, keeping no binding:
        for the exports an instance calls once, when it starts (`_initialize`,
        `wasmext_abi_version`, `wasmext_register`, the first `wasmext_alloc`).

        Their extern, argument and trap slots are the binding's, reused: those calls
        are made one after the other, never while another of them runs (a host call
        made meanwhile calls what it needs through `func`)."""
        raw = self._raw
        if raw is None:
            return self.func(name, len(params), has_result)(*params)
        once = self._once
        if once is None:
            item, u32, trap = (raw.ffi.wasmtime_extern_t(), (ctypes.c_uint32 * 8)(),
                               ctypes.c_void_p())
            pitem = ctypes.addressof(item)
            once = self._once = (item, u32, trap, pitem, pitem + type(item).of.offset,
                                 ctypes.addressof(u32), ctypes.addressof(trap))
        item, u32, trap, pitem, pfunc, pargs, ptrap = once
        key = name.encode()
        if not raw.export_by_name(self._ctx, self._instance, key, len(key), pitem):
            raise KeyError(name)
        u32[1] = 0  # an i32 result leaves the high half as it was
        for i, p in enumerate(params):
            u32[i * 4] = p
        err = raw.call(self._ctx, pfunc, pargs, max(len(params), 1), ptrap)
        if err or trap.value:
            caught, trap.value = trap.value, None
            _raise_failure(raw, err, caught)
        return u32[0] | u32[1] << 32 if has_result else 0


def _bind_public(store: wasmtime.Store, func: wasmtime.Func, has_result: bool) -> Caller:
    def invoke(*params: int) -> int:
        signed = [p - (1 << 32) if p >= 1 << 31 else p for p in params]
        caught: BaseException | None = None
        try:
            result = func(store, *signed)
        except BaseException:
            # wasmtime-py raised what its global held, which may be another thread's.
            caught = take_host_exception()
            if caught is None:
                raise
        if caught is not None:
            raise caught  # outside the handler: nothing of the other thread's rides along
        if not has_result:
            return 0
        return int(result) & ((1 << 64) - 1)

    return invoke
