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
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import wasmtime

log = logging.getLogger("wasmext.sandbox.fastcall")

__all__ = ["FAST_PATH", "SUPPORTED_WASMTIME", "Caller", "ExportKey", "Handle", "MemoryView",
           "StoreBinding", "budget_setter", "export_key", "handle", "host_failure_standin",
           "keep_host_exception", "new_store", "store_address", "store_handle",
           "take_host_exception", "wasmtime_version"]

SUPPORTED_WASMTIME = (50, 51)  # [low, high) major versions verified by the tests
WASM32_SPAN = 1 << 32

Caller = Callable[..., int]


@functools.cache
def wasmtime_version() -> str:
    """The installed wasmtime's version, as its distribution's metadata says it."""
    # The Version header of the one dist-info beside the package, as importlib.metadata
    # reads it; importlib.metadata itself (a tenth of `import wasmext.host`) only when
    # the layout is another (several dist-infos, an egg, a source tree).
    try:
        beside = list(Path(wasmtime.__file__).parent.parent.glob("wasmtime-*.dist-info"))
        if len(beside) == 1:
            with (beside[0] / "METADATA").open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        break  # the headers end at the first empty line
                    if line.startswith("Version:"):
                        return line.removeprefix("Version:").strip()
    except (OSError, UnicodeDecodeError):
        pass
    from importlib.metadata import version

    return version("wasmtime")


def _wasmtime_major() -> int:
    try:
        return int(wasmtime_version().split(".")[0])
    except Exception:  # pragma: no cover - broken install
        return -1


class Handle(ctypes.c_void_p):
    """An address as the ctypes object an untyped entry passes on as it is (a
    c_void_p subclass: ctypes hands a result of this type back unconverted)."""


def handle(address: int) -> Handle:
    """`address` as a `Handle`."""
    return Handle(address)


class _Raw:
    """Private function pointers taking plain addresses.

    The entry that runs guest code releases the GIL (the epoch ticker must run
    while a guest spins); the bookkeeping entries are PYFUNCTYPE, which keeps
    the GIL, because they return in nanoseconds and the hand-off costs more.
    Fresh prototypes, so nothing here alters wasmtime-py's own.
    """

    def __init__(self) -> None:
        from wasmtime import _ffi as ffi

        dll = ffi.dll
        vp, u64 = ctypes.c_void_p, ctypes.c_uint64
        self.ffi = ffi
        self.call = ctypes.CFUNCTYPE(vp, vp, vp, vp, ctypes.c_size_t, vp)(
            ("wasmtime_func_call_unchecked", dll))

        def untyped(restype: Any, name: str, runs_guest: bool = False) -> Any:
            # No argument types: every argument is passed as a ctypes object (an
            # address as a c_void_p, a size as a c_size_t, a count as a c_int64) or
            # as None for NULL, and ctypes passes it without calling a converter per
            # argument, most of what a foreign call costs here. A bare int would be
            # passed as a C int: never pass one.
            entry = (ctypes.CFUNCTYPE if runs_guest else ctypes.PYFUNCTYPE)(restype)(
                (name, dll))
            entry.argtypes = None  # type: ignore[assignment]  # ctypes takes None
            return entry

        self.mem_data = untyped(vp, "wasmtime_memory_data")
        self.mem_size = untyped(ctypes.c_size_t, "wasmtime_memory_data_size")
        self.set_fuel = ctypes.PYFUNCTYPE(vp, vp, u64)(("wasmtime_context_set_fuel", dll))
        self.set_deadline = ctypes.PYFUNCTYPE(None, vp, u64)(
            ("wasmtime_context_set_epoch_deadline", dll))
        self.get_fuel = ctypes.PYFUNCTYPE(vp, vp, vp)(("wasmtime_context_get_fuel", dll))
        self.kind_memory = ffi.WASMTIME_EXTERN_MEMORY.value
        # What starting an instance calls: plain-address prototypes skip the argument
        # type checks of wasmtime-py's. Instantiation runs the guest's start function,
        # so it releases the GIL like `call`.
        self.set_fuel_untyped = untyped(vp, "wasmtime_context_set_fuel")
        self.set_deadline_untyped = untyped(None, "wasmtime_context_set_epoch_deadline")
        self.export_by_name = untyped(ctypes.c_bool, "wasmtime_instance_export_get")
        self.call_untyped = untyped(vp, "wasmtime_func_call_unchecked", runs_guest=True)
        self.pre_instantiate = untyped(vp, "wasmtime_instance_pre_instantiate",
                                       runs_guest=True)
        self.limiter = untyped(None, "wasmtime_store_limiter")
        self.store_delete = untyped(None, "wasmtime_store_delete")
        # Without user data or finalizer (both NULL), as `new_store` makes every store;
        # both answer an address as the c_void_p that later calls pass on.
        self.store_new = untyped(Handle, "wasmtime_store_new")
        self.store_context = untyped(Handle, "wasmtime_store_context")
        # A binding's scratch words (u64): where instantiation writes the instance and
        # a trap, an export lookup its extern, a start-up call its arguments and result
        # (16-byte wasmtime_val_raw_t slots), and the memory's extern, kept for its
        # size and base reads. Offsets from wasmtime-py's own structure layouts.
        extern = ffi.wasmtime_extern_t
        words = ctypes.sizeof(ffi.wasmtime_instance_t) // 8
        self.trap_word = words
        self.extern_word = words + 1
        self.args_word = self.extern_word + -(-ctypes.sizeof(extern) // 8)
        self.memory_word = self.args_word + 8  # four argument slots
        self.scratch_words = self.memory_word + -(-ctypes.sizeof(extern) // 8)
        self.extern_of = extern.of.offset


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


class _RawStore(wasmtime.Store):
    """A `wasmtime.Store` made by `new_store`: it holds its own and its context's
    addresses, makes wasmtime-py's pointer objects only when one of wasmtime-py's
    methods asks for them, and is deleted through a plain-address entry."""

    raw_address = 0  # the wasmtime_store_t; 0 once closed
    raw_context = 0  # its wasmtime_context_t
    raw_handle: Any = None  # the store's address as a Handle
    raw_ctx: Any = None  # its context's
    free: Any = None  # the raw delete entry (a class attribute: set once, below)

    def ptr(self) -> Any:
        if not self.raw_address:
            raise ValueError("already closed")
        return ctypes.pointer(_RAW_FFI.wasmtime_store_t.from_address(self.raw_address))

    def _context(self) -> Any:
        if not self.raw_address:
            raise ValueError("already closed")
        return ctypes.pointer(_RAW_FFI.wasmtime_context_t.from_address(self.raw_context))

    def close(self) -> None:
        if self.raw_address:
            self.raw_address = 0
            type(self).free(self.raw_handle)

    __del__ = close  # Managed's `__del__` calls `close`: one Python frame less

    def _delete(self, ptr: Any) -> None:  # never reached: `close` deletes
        self.close()


_RAW_FFI: Any = None
if _RAW is not None:
    _RawStore.free = _RAW.store_delete
    _RAW_FFI = _RAW.ffi


def new_store(engine: wasmtime.Engine, engine_handle: Handle | None = None) -> wasmtime.Store:
    """A `wasmtime.Store` of `engine` without user data, as `wasmtime.Store(engine)`
    makes it, minus the checks and wrappers around its foreign calls
    (`engine_handle`: the engine's wasm_engine_t, when the caller keeps it)."""
    raw = _RAW
    if raw is None:
        return wasmtime.Store(engine)
    store = _RawStore.__new__(_RawStore)
    store.raw_handle = address = raw.store_new(
        engine_handle or handle(ctypes.addressof(engine.ptr().contents)), None, None)
    store.raw_address = address.value
    store.raw_ctx = ctx = raw.store_context(address)
    store.raw_context = ctx.value
    store.engine = engine
    return store


def store_address(store: wasmtime.Store) -> int:
    """The address of `store`'s wasmtime_store_t (known to a `new_store` store)."""
    return getattr(store, "raw_address", 0) or ctypes.addressof(store.ptr().contents)


def store_handle(store: wasmtime.Store) -> Handle:
    """`store_address` as a `Handle`."""
    kept: Handle | None = getattr(store, "raw_handle", None)
    return kept if kept is not None else handle(store_address(store))


class MemoryView:
    """Bounds-checked access to one instance's linear memory.

    The base address is read once; only the size changes (memory never
    shrinks). Bytes move through a memoryview spanning the whole wasm32 address
    space: nothing outside a checked slice is ever touched, and a slice copy
    costs no foreign call.
    """

    def __init__(self, base: int, size: Callable[[], int], now: int | None = None) -> None:
        """`now`: the memory's size, when the caller knows it (else it is asked)."""
        self.base = base
        self.size = size
        span = (ctypes.c_ubyte * WASM32_SPAN).from_address(base)
        self._view = memoryview(span).cast("B")
        # The same view for a hot path that checks `known` itself (one frame less per
        # host call): only ever sliced below `known`.
        self.view = self._view
        # As of the latest read(): lets a fault tell if memory grew.
        self.last_size = size() if now is None else now
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
    ctx = getattr(store, "raw_context", 0) or ctypes.addressof(store._context().contents)

    def set_raw(fuel: int, ticks: int, _keep: wasmtime.Store = store) -> None:
        # set_fuel fails only when fuel is disabled, which SharedEngine never does.
        # (`_keep`: the context lives as long as its store.)
        set_fuel(ctx, fuel)
        set_deadline(ctx, ticks)
    return set_raw


class ExportKey(NamedTuple):
    """An export's name as the untyped lookup takes it: its bytes and their length."""

    name: bytes
    size: ctypes.c_size_t


def export_key(name: str) -> ExportKey:
    """The `ExportKey` of export `name` (make it once; the objects are only read)."""
    key = name.encode()
    return ExportKey(key, ctypes.c_size_t(len(key)))


_MEMORY_KEY = export_key("memory")
_ARG_COUNTS = tuple(ctypes.c_size_t(n) for n in range(5))  # call_once's argument counts
_LIMITS: dict[tuple[int, ...], tuple[ctypes.c_int64, ...]] = {}  # limiter arguments, by value
_MAX_LIMITS = 256
_U64: dict[int, ctypes.c_uint64] = {}  # fuel and tick counts as the untyped entries take them


def _u64(value: int) -> ctypes.c_uint64:
    kept = _U64.get(value)
    if kept is None:
        kept = ctypes.c_uint64(value)
        if len(_U64) < _MAX_LIMITS:
            _U64[value] = kept
    return kept


class StoreBinding:
    """Fast entry points into one instance in one store.

    Made with an instance, or with none and then `limit` and `instantiate`: starting
    an instance this way makes no wasmtime-py objects besides the Store. Where the raw
    entries are loaded, the instance, the memory's extern and the start-up calls'
    arguments, results and traps live in one scratch array of the binding's, passed
    to wasmtime by address.
    """

    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance | None = None) -> None:
        self.store = store
        raw = self._raw = _RAW
        if raw is None:
            self.instance: Any = instance
            return
        self._ctx = getattr(store, "raw_context", 0) or \
            ctypes.addressof(store._context().contents)
        self._hctx = getattr(store, "raw_ctx", None) or handle(self._ctx)
        self._scratch = scratch = (ctypes.c_uint64 * raw.scratch_words)()
        self._base = base = ctypes.addressof(scratch)
        self._instance = base
        # The scratch's slots as the untyped entries take them.
        self._htrap = Handle(base + 8 * raw.trap_word)
        self._hitem = Handle(base + 8 * raw.extern_word)
        self._hfunc = Handle(base + 8 * raw.extern_word + raw.extern_of)
        self._hargs = Handle(base + 8 * raw.args_word)
        if instance is not None:
            ctypes.memmove(base, ctypes.addressof(instance._instance), 16)

    def limit(self, memory_size: int, table_elements: int, instances: int, tables: int,
              memories: int) -> None:
        """The store's resource limits (`wasmtime.Store.set_limits`)."""
        raw = self._raw
        if raw is None:
            self.store.set_limits(memory_size=memory_size, table_elements=table_elements,
                                  instances=instances, tables=tables, memories=memories)
            return
        values = (memory_size, table_elements, instances, tables, memories)
        args = _LIMITS.get(values)
        if args is None:
            args = tuple(ctypes.c_int64(v) for v in values)
            if len(_LIMITS) < _MAX_LIMITS:
                _LIMITS[values] = args
        raw.limiter(store_handle(self.store), *args)

    def instantiate(self, pre: wasmtime.InstancePre, pre_handle: Handle | None = None) -> None:
        """Start `pre`'s instance in the store (`pre_handle`: its address, when the
        caller keeps it). A failure raises the exception a host function raised on this
        thread, else the wasmtime error or the trap.

        The GIL is let go even for a module without a start function: kept through
        instantiation (which maps the instance's memory), it made the median instance
        about 1.5 times slower on a quiet machine (docs/performance.md, new_instance,
        sixth round, third pass)."""
        raw = self._raw
        if raw is None:
            self.instance = pre.instantiate(self.store)
            return
        trap_at = raw.trap_word
        err = raw.pre_instantiate(pre_handle or handle(ctypes.addressof(pre.ptr().contents)),
                                  self._hctx, self._scratch, self._htrap)
        if err or self._scratch[trap_at]:
            caught, self._scratch[trap_at] = self._scratch[trap_at], 0
            _raise_failure(raw, err, caught)

    def _export(self, name: str) -> Any:
        raw = self._raw
        if raw is None:
            return self.instance.exports(self.store).get(name)
        key = export_key(name)
        item = raw.ffi.wasmtime_extern_t()
        if not raw.export_by_name(self._hctx, self._scratch, key.name, key.size,
                                  ctypes.byref(item)):
            return None
        return item.of.memory if item.kind == raw.kind_memory else item.of.func

    def has(self, name: str) -> bool:
        """Whether the instance exports the name."""
        return self._export(name) is not None

    def memory(self, name: str = "memory", now: int | None = None) -> MemoryView:
        """A view of the exported memory, read and written in place (`now`: its size,
        when the caller knows it)."""
        raw = self._raw
        if raw is None:
            mem, store = self._export(name), self.store
            return MemoryView(ctypes.addressof(mem.data_ptr(store).contents),
                              lambda: int(mem.data_len(store)), now)
        key = _MEMORY_KEY if name == "memory" else export_key(name)
        item = self._base + 8 * raw.memory_word
        if not raw.export_by_name(self._hctx, self._scratch, key.name, key.size,
                                  Handle(item)) or \
                self._scratch[raw.memory_word] & 0xFF != raw.kind_memory:
            raise KeyError(name)
        ctx, pmem = self._hctx, Handle(item + raw.extern_of)
        view = MemoryView(int(raw.mem_data(ctx, pmem) or 0), partial(raw.mem_size, ctx, pmem),
                          now)
        view.__dict__["_keep"] = (self._scratch, self.store)
        return view

    def start_budget(self, fuel: int, ticks: int) -> None:
        """Set the store's fuel and epoch deadline, as `budget()`'s setter does, for the
        calls an instance makes once, when it starts (untyped entries; the values as
        ctypes objects, kept by value)."""
        raw = self._raw
        if raw is None:
            self.store.set_fuel(fuel)
            self.store.set_epoch_deadline(ticks)
            return
        # set_fuel fails only when fuel is disabled, which SharedEngine never does.
        raw.set_fuel_untyped(self._hctx, _u64(fuel))
        raw.set_deadline_untyped(self._hctx, _u64(ticks))

    def start_deadline(self, ticks: int) -> None:
        """`start_budget` without the fuel: for a start-up call that shares the fuel
        set for the one before it (no guest code ran since)."""
        raw = self._raw
        if raw is None:
            self.store.set_epoch_deadline(ticks)
            return
        raw.set_deadline_untyped(self._hctx, _u64(ticks))

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
        # `fn` must stay valid: the caller keeps `func`. Not the store: a trap's
        # traceback keeps this frame, the frame its function, and a plugin's last fault
        # (a load error, a failure the application keeps) kept the instance's memory and
        # its pool slot with it. The store outlives every call of the caller all the
        # same: only the instance holding this binding (and the store) holds the caller.
        chosen.__dict__["_keep"] = func
        return chosen

    def call_once(self, key: ExportKey, has_result: bool, *params: int) -> int:
        """Call export `key` (`export_key(name)`) with u32 `params` as `func(...)` would,
        keeping no binding: for the exports an instance calls once, when it starts
        (`_initialize`, `wasmext_abi_version`, `wasmext_register`, the first
        `wasmext_alloc`).

        Their extern, argument and trap slots are the binding's scratch, reused: those
        calls are made one after the other, never while another of them runs (a host
        call made meanwhile calls what it needs through `func`)."""
        raw = self._raw
        if raw is None:
            return self.func(key.name.decode(), len(params), has_result)(*params)
        scratch = self._scratch
        if not raw.export_by_name(self._hctx, scratch, key.name, key.size, self._hitem):
            raise KeyError(key.name.decode())
        at = raw.args_word
        scratch[at] = 0  # an i32 result leaves the high half as it was
        for p in params:
            scratch[at] = p  # zero-extended: the u32 argument, its high half clear
            at += 2  # a wasmtime_val_raw_t is two words
        err = raw.call_untyped(self._hctx, self._hfunc, self._hargs,
                               _ARG_COUNTS[len(params) or 1], self._htrap)
        trap_at = raw.trap_word
        if err or scratch[trap_at]:
            caught, scratch[trap_at] = scratch[trap_at], 0
            _raise_failure(raw, err, caught)
        return int(scratch[raw.args_word]) if has_result else 0


def _bind_public(store: wasmtime.Store, func: wasmtime.Func, has_result: bool) -> Caller:
    # Not the store itself, as `StoreBinding.func` keeps none: a trap's frames keep
    # this function.
    store_of = weakref.ref(store)

    def invoke(*params: int) -> int:
        signed = [p - (1 << 32) if p >= 1 << 31 else p for p in params]
        caught: BaseException | None = None
        store = store_of()
        if store is None:  # its instance is gone: nothing may run in it
            raise RuntimeError("the store of this binding was dropped")
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
