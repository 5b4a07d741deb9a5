"""The cached host-function trampoline: guest→host calls without `Val` objects.

wasmtime-py's `Linker.define_func` routes every import call through one
generic trampoline that looks the function up in a slab, wraps the caller,
builds a `Val` per argument and converts the result back: most of what a cheap
host call (`log`) costs. wasmext's two imports have fixed signatures (checked
at load), so each gets its own `wasmtime_linker_define_func_unchecked`
callback: the arguments are read straight out of the raw value array with one
precompiled `struct` format, and an i64 result is written back in place.

A Python exception in the host function becomes a trap, and the exception waits
in this thread's slot (`fastcall.keep_host_exception`) for the failed call to
re-raise, so the instance classifies faults the same way either way. Functions
on the public API go through `define_public`, which keeps their exception in the
same slot and hands wasmtime-py's trampoline a message-free stand-in: its
`LAST_EXCEPTION` is one global for all threads, and another thread's failing
call took from it an error that was not its own (another plugin's included).
The raw symbols are private to wasmtime-py: when `fastcall` does not trust
this wasmtime, or a symbol is missing, `define` answers False and the caller
uses `define_public` (`FAST_HOST_CALLS` says which is active; tests pin both).
"""

from __future__ import annotations

import ctypes
import logging
import struct
import sys
from collections.abc import Callable
from typing import Any

import wasmtime

from wasmext.sandbox import calltree, fastcall
from wasmext.sandbox.fastcall import host_failure_standin, keep_host_exception

log = logging.getLogger("wasmext.sandbox.hosttramp")

__all__ = ["FAST_HOST_CALLS", "define", "define_guest_method", "define_public"]

_VAL_RAW_SIZE = 16  # sizeof(wasmtime_val_raw_t): a union of up to a v128
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")

# size_t callback(void *env, wasmtime_caller_t *caller, wasmtime_val_raw_t *args, size_t n)
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_size_t)


def _load() -> Any:
    if not fastcall.FAST_PATH:
        return None
    try:
        from wasmtime import _bindings
        from wasmtime import _ffi as ffi

        vp, size = ctypes.c_void_p, ctypes.c_size_t
        # A fresh prototype (as fastcall's): plain addresses, our callback type.
        fn = ctypes.CFUNCTYPE(vp, vp, ctypes.c_char_p, size, ctypes.c_char_p, size, vp,
                              _CALLBACK, vp, vp)(("wasmtime_linker_define_func_unchecked",
                                                  ffi.dll))
        trap_new = _bindings._wasmtime_trap_new
    except (AttributeError, ImportError) as exc:  # pragma: no cover - layout changed
        log.warning("wasmtime's raw linker bindings changed (%s); host calls use the "
                    "public API", exc)
        return None
    return fn, trap_new


_RAW = _load()
FAST_HOST_CALLS = _RAW is not None
_kept: list[Any] = []  # callbacks live as long as the process: linkers never drop them


_TRAP_MESSAGE = b"python exception"  # what wasmtime-py's own trampoline says


def _trap(exc: BaseException) -> int:
    """Keep `exc` for this thread's failed call; a trap pointer for wasmtime."""
    keep_host_exception(exc)
    trap = _RAW[1](_TRAP_MESSAGE, len(_TRAP_MESSAGE))
    return ctypes.cast(trap, ctypes.c_void_p).value or 0


_CODES = {"i32": ("I", 4), "i64": ("q", 8)}  # i32 as unsigned, i64 as signed


def _process_span() -> memoryview:
    """The process's address space as one byte buffer, addressed by absolute address.

    The raw value array wasmtime hands a callback lives on its stack, at a new
    address each call: reading it with `string_at` and writing the result with
    `memmove` were two foreign calls per host call (two thirds of what the
    trampoline cost); `struct`'s `unpack_from`/`pack_into` at the array's address
    in this view cost none. Only the slots wasmtime passes are ever touched.
    """
    return memoryview((ctypes.c_ubyte * sys.maxsize).from_address(0)).cast("B")


_SPAN = _process_span()


def _args(params: list[str]) -> Callable[[memoryview, int], tuple[int, ...]]:
    """`unpack_from(span, ptr)`: the arguments of these types out of a raw value array
    (one 16-byte slot each) at `ptr`."""
    fmt = struct.Struct("<" + "".join(f"{_CODES[p][0]}{_VAL_RAW_SIZE - _CODES[p][1]}x"
                                      for p in params))
    return fmt.unpack_from


def _callback(fn: Callable[..., int | None], params: list[str], result: str | None) -> Any:
    read = _args(params)
    span, pack_into = _SPAN, _I64.pack_into

    if result == "i32":  # WASI's errno answers
        pack32_into = _I32.pack_into

        def raw(env: int, caller: int, values: int, count: int) -> int:
            try:
                pack32_into(span, values, fn(*read(span, values)))
                return 0
            except BaseException as exc:
                return _trap(exc)
    elif result == "i64":
        def raw(env: int, caller: int, values: int, count: int) -> int:
            try:
                pack_into(span, values, fn(*read(span, values)))  # the result goes in slot 0
                return 0
            except BaseException as exc:
                return _trap(exc)
    else:
        def raw(env: int, caller: int, values: int, count: int) -> int:
            try:
                fn(*read(span, values))
                return 0
            except BaseException as exc:
                return _trap(exc)
    return _CALLBACK(raw)


def define(linker: wasmtime.Linker, module: str, name: str, ty: wasmtime.FuncType,
           fn: Callable[..., int | None]) -> bool:
    """Define `module.name` with the fast trampoline; False: use `define_func` instead.

    `ty` takes i32 and i64 parameters and returns nothing, one i32 or one i64; `fn`
    gets i32 parameters as unsigned ints, i64 ones as signed, and returns a signed
    int (or None).
    """
    if _RAW is None:
        return False
    params = [str(p) for p in ty.params]
    results = [str(r) for r in ty.results]
    if any(p not in _CODES for p in params) or results not in ([], ["i32"], ["i64"]):
        return False
    return _define_raw(linker, module, name, ty,
                       _callback(fn, params, results[0] if results else None))


_tree = calltree._tree  # the per-thread frame stack


def define_guest_method(linker: wasmtime.Linker, module: str, name: str,
                        ty: wasmtime.FuncType, method: str) -> bool:
    """Define `module.name` as a call of `method` on the guest of this thread's innermost
    call-tree frame, with the fast trampoline; False: define it another way.

    For `(i32, i32) -> i64` imports (`host_call`): the method gets both as unsigned
    ints and returns the i64 unsigned (a packed ptr and length). One Python frame
    less per call than `define` with a function that finds the guest itself.
    """
    if _RAW is None or [str(p) for p in ty.params] != ["i32", "i32"] or \
            [str(r) for r in ty.results] != ["i64"]:
        return False
    read = _args(["i32", "i32"])
    span, pack_into, tree = _SPAN, _U64.pack_into, _tree

    def raw(env: int, caller: int, values: int, count: int) -> int:
        try:
            guest = tree.stack[-1].guest  # type: ignore[union-attr]
            pack_into(span, values, getattr(guest, method)(*read(span, values)))
            return 0
        except BaseException as exc:
            return _trap(exc)
    return _define_raw(linker, module, name, ty, _CALLBACK(raw))


def _define_raw(linker: wasmtime.Linker, module: str, name: str, ty: wasmtime.FuncType,
                callback: Any) -> bool:
    define_raw = _RAW[0]
    m, n = module.encode(), name.encode()
    linker_ptr = ctypes.cast(linker.ptr(), ctypes.c_void_p).value
    ty_ptr = ctypes.cast(ty.ptr(), ctypes.c_void_p).value
    error = define_raw(linker_ptr, m, len(m), n, len(n), ty_ptr, callback, None, None)
    if error:
        from wasmtime import _ffi as ffi

        raise wasmtime.WasmtimeError._from_ptr(
            ctypes.cast(error, ctypes.POINTER(ffi.wasmtime_error_t)))
    _kept.append(callback)
    return True


def define_public(linker: wasmtime.Linker, module: str, name: str, ty: wasmtime.FuncType,
                  fn: Callable[..., int | None]) -> None:
    """Define `module.name` with `Linker.define_func`, its exceptions kept per thread."""
    def call(*args: int) -> int | None:
        try:
            return fn(*args)
        except BaseException as exc:
            keep_host_exception(exc)
        # Outside the handler, so the stand-in carries no context: whichever thread
        # wasmtime-py's global hands it to learns nothing from it.
        raise host_failure_standin()

    linker.define_func(module, name, ty, call)
