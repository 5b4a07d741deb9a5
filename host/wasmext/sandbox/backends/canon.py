"""`list<u8>` across the component boundary at C speed.

wasmtime-py's generic component calls convert a `list<u8>` one element at a
time in Python (a `wasmtime_component_val_t` per byte) and look up the
function's type on every call: for the ABI's MessagePack payloads that is
most of the host's share of a call, and it grows with the payload. The world
`wasmext:plugin@1.0.0` has only `list<u8> -> list<u8>` functions on the hot
path, so this module moves those bytes with slice assignments on the C array
of values (one pass in C, whatever the size), and registers the `host-call`
import with a callback that does the same.

It uses the C API that wasmtime-py itself binds (`wasmtime._ffi`); the layout
of a value is read from those bindings, never assumed.
"""

from __future__ import annotations

import _ctypes
import ctypes
import threading
from collections.abc import Callable
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime.component import _enter

__all__ = ["BytesExport", "add_bytes_import", "bytes_from_val", "bytes_to_val"]

_VAL = ffi.wasmtime_component_val_t
_SIZE = ctypes.sizeof(_VAL)
_VALUE_AT = _VAL.of.offset
_U8 = ffi.WASMTIME_COMPONENT_U8.value
_LIST = ffi.WASMTIME_COMPONENT_LIST.value
_BOOL = ffi.WASMTIME_COMPONENT_BOOL.value
# Requests up to this many bytes are lowered through an export's reused image of
# the value array (32 KiB for 1,024 values); longer ones build a one-off image.
IMAGE_MAX = 1024


def bytes_to_val(data: bytes, val: Any) -> None:
    """Make `val` (a wasmtime_component_val_t) the list<u8> of `data`; it owns the list."""
    n = len(data)
    raw = ffi.wasmtime_component_vallist_t()
    ffi.wasmtime_component_vallist_new_uninit(ctypes.byref(raw), n)
    if n:
        image = bytearray(n * _SIZE)
        image[0::_SIZE] = bytes((_U8,)) * n
        image[_VALUE_AT::_SIZE] = data
        ctypes.memmove(raw.data, bytes(image), len(image))
    val.kind = _LIST
    val.of.list = raw


def bytes_from_val(val: Any, limit: int) -> bytes | None:
    """The bytes of a list<u8> value (None when longer than `limit`, or not a list<u8>)."""
    return _list_bytes(val.kind, val.of.list.size, val.of.list.data, limit)


def _list_bytes(kind: int, n: int, data: int | None, limit: int) -> bytes | None:
    """The bytes of a value of `kind` whose list fields read `n` and `data` (None when
    longer than `limit`, or not a list<u8>; the list fields are read only for a list)."""
    if kind != _LIST:
        return None
    if n > limit:
        return None
    if not n:
        return b""
    image: bytes = _RAW.read(data, n * _SIZE)
    if image[0::_SIZE] != bytes((_U8,)) * n:
        return None
    return image[_VALUE_AT::_SIZE]


class _RawEntries:
    """The three C entries of an export call as plain-address prototypes: they skip
    wasmtime-py's Python wrappers and ctypes' argument type checks (most of the host's
    own time in a small call). The bookkeeping entries keep the GIL (they return in
    nanoseconds); the call releases it, as wasmtime-py's binding does (the epoch
    ticker must run while a guest spins)."""

    def __init__(self) -> None:
        vp, size = ctypes.c_void_p, ctypes.c_size_t
        dll = ffi.dll
        self.call = ctypes.CFUNCTYPE(vp, vp, vp, vp, size, vp, size)(
            ("wasmtime_component_func_call", dll))
        self.new_list = ctypes.PYFUNCTYPE(None, vp, size)(
            ("wasmtime_component_vallist_new_uninit", dll))
        self.delete = ctypes.PYFUNCTYPE(None, vp)(("wasmtime_component_val_delete", dll))
        # ctypes' own memmove, memset and string_at, without handing the GIL off around
        # a copy of a few KiB (ctypes.memmove and memset do; a waiting thread then runs).
        native: Any = _ctypes
        self.copy = ctypes.PYFUNCTYPE(vp, vp, vp, size)(native._memmove_addr)
        self.fill = ctypes.PYFUNCTYPE(vp, vp, ctypes.c_int, size)(native._memset_addr)
        self.read = ctypes.PYFUNCTYPE(ctypes.py_object, vp, ctypes.c_int)(
            native._string_at_addr)


_RAW = _RawEntries()
_KIND: Any = dict(_VAL._fields_)["kind"]  # type: ignore[arg-type]  # the kind field's C type, at _KIND_AT
_KIND_AT = _VAL.kind.offset
_VALLIST: Any = ffi.wasmtime_component_vallist_t
_LIST_AT = _VALUE_AT + _VALLIST.size.offset
_DATA_AT = _VALUE_AT + _VALLIST.data.offset
# A pointer field read as a plain int (size_t is pointer-sized on wasmtime's targets).
_ADDRESS = ctypes.c_size_t
assert ctypes.sizeof(_ADDRESS) == ctypes.sizeof(ctypes.c_void_p)


def _release(at: int) -> None:
    """Free the value at `at` and leave a bool in its place: wasmtime's call assigns
    its results over what the slots hold (dropping it), so a kept result slot must
    never hold a list already freed."""
    _RAW.delete(at)
    _RAW.fill(at, 0, _SIZE)
    if _BOOL:
        _KIND.from_address(at + _KIND_AT).value = _BOOL


class BytesExport:
    """An exported `func(list<u8>) -> list<u8>`, called without per-call type lookups."""

    def __init__(self, instance: wasmtime.component.Instance, store: wasmtime.Store,
                 name: str) -> None:
        func = instance.get_func(store, name)
        if func is None:
            raise LookupError(name)
        fty = func.type(store)
        params = [str(type(t).__name__) for _, t in fty.params]
        result = type(fty.result).__name__ if fty.result is not None else None
        if params != ["ListType"] or result != "ListType":
            raise TypeError(f"export {name} is not func(list<u8>) -> list<u8>")
        self._func = func._func
        self._store = store  # the context below lives as long as its store
        self._func_at = ctypes.addressof(self._func)
        self._context = ctypes.addressof(store._context().contents)
        # The argument and the result, one value each, kept for the instance's life
        # with their addresses and views of their fields: a call allocates no ctypes
        # objects. An instance runs one call at a time; a call that finds them in use
        # (re-entry: wasmtime would refuse it anyway) takes fresh ones.
        self._arg, self._result = _VAL(), _VAL()
        self._arg_at, self._result_at = ctypes.addressof(self._arg), ctypes.addressof(self._result)
        self._arg_data = _ADDRESS.from_address(self._arg_at + _DATA_AT)
        self._result_kind = _KIND.from_address(self._result_at + _KIND_AT)
        self._result_size = ctypes.c_size_t.from_address(self._result_at + _LIST_AT)
        self._result_data = _ADDRESS.from_address(self._result_at + _DATA_AT)
        self._busy = False
        # The value array of a request, kept between calls with every kind already
        # U8: a call writes only the bytes' slots (the image is copied out before the
        # guest runs).
        self._image = bytearray(IMAGE_MAX * _SIZE)
        self._image[0::_SIZE] = bytes((_U8,)) * IMAGE_MAX
        self._image_c = (ctypes.c_char * len(self._image)).from_buffer(self._image)
        self._image_at = ctypes.addressof(self._image_c)

    def __call__(self, data: bytes, limit: int) -> bytes | None:
        """The answer, or None when it is longer than `limit` (it is dropped unread)."""
        n = len(data)
        if self._busy or not 0 < n <= IMAGE_MAX:
            return self._call_fresh(data, limit)
        raw = _RAW
        self._busy = True
        try:
            size = n * _SIZE
            self._image[_VALUE_AT:size:_SIZE] = data
            raw.new_list(self._arg_at + _LIST_AT, n)
            raw.copy(self._arg_data.value, self._image_at, size)
            self._arg.kind = _LIST
            try:
                err = raw.call(self._func_at, self._context, self._arg_at, 1,
                               self._result_at, 1)
            finally:
                _release(self._arg_at)
            if err:
                self._raise(err)
            try:
                return self._lift(limit)
            finally:
                _release(self._result_at)
        finally:
            self._busy = False

    def _lift(self, limit: int) -> bytes | None:
        """The result's bytes (None: longer than `limit`, or not a list<u8>)."""
        return _list_bytes(self._result_kind.value, self._result_size.value,
                           self._result_data.value, limit)

    @staticmethod
    def _raise(err: int) -> None:
        error = wasmtime.WasmtimeError._from_ptr(
            ctypes.cast(err, ctypes.POINTER(ffi.wasmtime_error_t)))
        # An exception raised by a generically linked import (`log`) waits there.
        _enter.maybe_raise_last_exn()
        raise error

    def _call_fresh(self, data: bytes, limit: int) -> bytes | None:
        """A call through values of its own: a request out of the image's range, or a
        re-entered export."""
        args = (_VAL * 1)()
        bytes_to_val(data, args[0])
        result = _VAL()
        try:
            err = _RAW.call(self._func_at, self._context, ctypes.addressof(args), 1,
                            ctypes.addressof(result), 1)
        finally:
            _RAW.delete(ctypes.addressof(args))
        if err:
            self._raise(err)
        try:
            out = bytes_from_val(result, limit)
        finally:
            _RAW.delete(ctypes.addressof(result))
        return out


# The callback below reaches the Python function through this table: ctypes
# callbacks cannot close over Python state the C side keeps alive.
_handlers: dict[int, Callable[[bytes | None], bytes]] = {}
_handlers_lock = threading.Lock()


def _fail(message: str) -> int:
    err = wasmtime.WasmtimeError(message)
    return ctypes.cast(err._consume(), ctypes.c_void_p).value or 0


@ffi.wasmtime_component_func_callback_t  # type: ignore[untyped-decorator]
def _bytes_callback(data: Any, context: Any, ty: Any, args: Any, nargs: int, results: Any,
                    nresults: int) -> int:
    handler = _handlers.get(data or 0)
    if handler is None or nargs != 1 or nresults != 1:
        return _fail("wasmext: host function called with the wrong shape")
    try:
        # The handler bounds the request size itself: None means "too long or not bytes".
        answer = handler(bytes_from_val(args[0], 1 << 32))
    except BaseException as exc:  # any exception must become a trap here
        return _fail(f"wasmext host function failed: {type(exc).__name__}: {exc}")
    bytes_to_val(answer, results[0])
    return 0


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # type: ignore[untyped-decorator]
def _keep(data: Any) -> None:
    """The finalizer: the handler table lives as long as the process."""


def add_bytes_import(instance: Any, name: str, handler: Callable[[bytes | None], bytes]) -> None:
    """Define `name: func(list<u8>) -> list<u8>` in a component LinkerInstance.

    `handler` gets the request bytes (None when they are not a list<u8>) and returns
    the answer; an exception it raises traps the guest (the caller keeps the cause).
    """
    with _handlers_lock:
        key = len(_handlers) + 1
        _handlers[key] = handler
    encoded = name.encode()
    err = ffi.wasmtime_component_linker_instance_add_func(
        instance.ptr(), ctypes.create_string_buffer(encoded), len(encoded), _bytes_callback,
        key, _keep)
    if err:
        raise wasmtime.WasmtimeError._from_ptr(err)
