"""A minimal, deny-by-default `wasi_snapshot_preview1`, written here.

wasmtime's own WASI runs blocking work on a tokio runtime: a guest could
sleep in `poll_oneoff` past its deadline (epochs do not reach host code), and
an `fd_read` on an unknown fd or a `path_open` left a worker thread that
panicked when the process exited (SIGABRT after the right answer). Plugins
need little of WASI, so the host links these functions instead:

- `fd_write` to fd 1 and 2 goes to the plugin log; `fd_read` of fd 0 is EOF;
- `clock_time_get`, `clock_res_get`, `random_get`, `sched_yield`;
- `args_*` and `environ_*` answer empty; `fd_fdstat_get`/`fd_filestat_get`
  describe fds 0-2 as character devices, which libc startup asks for;
- `poll_oneoff` sleeps only within the call's deadline: a sleep that would
  run past it fails the call with `Timeout` at once;
- `proc_exit` ends the call with `GuestTrap`;
- everything else answers EBADF (fd, path and socket calls: there are no
  files, preopens or sockets) or ENOSYS, without touching the host.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

import wasmtime

__all__ = ["SIGNATURES", "WasiGuest", "define"]

MODULE = "wasi_snapshot_preview1"
SUCCESS, BADF, FAULT, INVAL, NOSYS, NOTSUP, SPIPE = 0, 8, 21, 28, 52, 58, 70
_CHAR_DEVICE = 2
_MAX_SUBSCRIPTIONS = 64
_MAX_IOVECS = 1024

_I, _L = "i32", "i64"
SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (tuple(params.split()), () if name == "proc_exit" else (_I,))
    for name, params in {
        "args_get": "i32 i32", "args_sizes_get": "i32 i32",
        "environ_get": "i32 i32", "environ_sizes_get": "i32 i32",
        "clock_res_get": "i32 i32", "clock_time_get": "i32 i64 i32",
        "fd_advise": "i32 i64 i64 i32", "fd_allocate": "i32 i64 i64", "fd_close": "i32",
        "fd_datasync": "i32", "fd_fdstat_get": "i32 i32", "fd_fdstat_set_flags": "i32 i32",
        "fd_fdstat_set_rights": "i32 i64 i64", "fd_filestat_get": "i32 i32",
        "fd_filestat_set_size": "i32 i64", "fd_filestat_set_times": "i32 i64 i64 i32",
        "fd_pread": "i32 i32 i32 i64 i32", "fd_prestat_get": "i32 i32",
        "fd_prestat_dir_name": "i32 i32 i32", "fd_pwrite": "i32 i32 i32 i64 i32",
        "fd_read": "i32 i32 i32 i32", "fd_readdir": "i32 i32 i32 i64 i32",
        "fd_renumber": "i32 i32", "fd_seek": "i32 i64 i32 i32", "fd_sync": "i32",
        "fd_tell": "i32 i32", "fd_write": "i32 i32 i32 i32",
        "path_create_directory": "i32 i32 i32", "path_filestat_get": "i32 i32 i32 i32 i32",
        "path_filestat_set_times": "i32 i32 i32 i32 i64 i64 i32",
        "path_link": "i32 i32 i32 i32 i32 i32 i32",
        "path_open": "i32 i32 i32 i32 i32 i64 i64 i32 i32",
        "path_readlink": "i32 i32 i32 i32 i32 i32", "path_remove_directory": "i32 i32 i32",
        "path_rename": "i32 i32 i32 i32 i32 i32", "path_symlink": "i32 i32 i32 i32 i32",
        "path_unlink_file": "i32 i32 i32", "poll_oneoff": "i32 i32 i32 i32",
        "proc_exit": "i32", "proc_raise": "i32", "sched_yield": "", "random_get": "i32 i32",
        "sock_accept": "i32 i32 i32", "sock_recv": "i32 i32 i32 i32 i32 i32",
        "sock_send": "i32 i32 i32 i32 i32", "sock_shutdown": "i32 i32",
    }.items()
}


class WasiGuest(Protocol):
    """What an instance offers the WASI functions (the top of hostlink's stack)."""

    def wasi_memory(self) -> Any:
        """The guest's memory view, or None before it exists."""
        ...  # a fastcall.MemoryView, or None before it exists

    def wasi_output(self, fd: int, data: bytes) -> None:
        """Pass the guest's stdout or stderr bytes on."""
        ...

    def wasi_seconds_left(self) -> float:
        """Seconds left before the call's deadline."""
        ...

    def wasi_timeout(self, why: str) -> None:
        """Fail the call with Timeout."""
        ...  # raises Timeout

    def wasi_exit(self, code: int) -> None:
        """Fail the call with GuestTrap."""
        ...  # raises GuestTrap


class _Fault(Exception):
    """A pointer outside guest memory: the function answers EFAULT."""


def _read(guest: WasiGuest, ptr: int, length: int) -> bytes:
    mem = guest.wasi_memory()
    data = mem.read(ptr & 0xFFFFFFFF, length) if mem is not None else None
    if data is None:
        raise _Fault
    return bytes(data)


def _write(guest: WasiGuest, ptr: int, data: bytes) -> None:
    mem = guest.wasi_memory()
    if mem is None or not mem.write(ptr & 0xFFFFFFFF, data):
        raise _Fault


def _iovecs(guest: WasiGuest, iovs: int, count: int) -> list[tuple[int, int]]:
    if count & 0xFFFFFFFF > _MAX_IOVECS:
        raise _Fault
    raw = _read(guest, iovs, 8 * count)
    return [struct.unpack_from("<II", raw, 8 * i) for i in range(count)]


def _fd_write(g: WasiGuest, fd: int, iovs: int, count: int, nwritten: int) -> int:
    if fd not in (1, 2):
        return BADF
    data = b"".join(_read(g, p, n) for p, n in _iovecs(g, iovs, count))
    g.wasi_output(fd, data)
    _write(g, nwritten, struct.pack("<I", len(data)))
    return SUCCESS


def _fd_read(g: WasiGuest, fd: int, iovs: int, count: int, nread: int) -> int:
    if fd != 0:
        return BADF
    _write(g, nread, b"\0\0\0\0")  # stdin is empty
    return SUCCESS


def _now(clock: int) -> int | None:
    if clock == 0:
        return time.time_ns()
    if clock in (1, 2, 3):  # process and thread time read as monotonic time
        return time.monotonic_ns()
    return None


def _clock_time_get(g: WasiGuest, clock: int, precision: int, out: int) -> int:
    now = _now(clock)
    if now is None:
        return INVAL
    _write(g, out, struct.pack("<Q", now))
    return SUCCESS


def _clock_res_get(g: WasiGuest, clock: int, out: int) -> int:
    if _now(clock) is None:
        return INVAL
    _write(g, out, struct.pack("<Q", 1000))
    return SUCCESS


def _random_get(g: WasiGuest, buf: int, length: int) -> int:
    mem = g.wasi_memory()
    if mem is None or (buf & 0xFFFFFFFF) + (length & 0xFFFFFFFF) > mem.size():
        return FAULT
    _write(g, buf, os.urandom(length & 0xFFFFFFFF))
    return SUCCESS


def _sizes(g: WasiGuest, count: int, size: int) -> int:
    _write(g, count, b"\0\0\0\0")
    _write(g, size, b"\0\0\0\0")
    return SUCCESS


def _fdstat(g: WasiGuest, fd: int, out: int) -> int:
    if fd not in (0, 1, 2):
        return BADF
    rights = (1 << 1) if fd == 0 else (1 << 6)  # fd_read or fd_write
    _write(g, out, struct.pack("<BxHxxxxQQ", _CHAR_DEVICE, 0, rights, 0))
    return SUCCESS


def _filestat(g: WasiGuest, fd: int, out: int) -> int:
    if fd not in (0, 1, 2):
        return BADF
    _write(g, out, struct.pack("<QQBxxxxxxxQQQQQ", 0, 0, _CHAR_DEVICE, 1, 0, 0, 0, 0))
    return SUCCESS


def _poll_oneoff(g: WasiGuest, subs: int, events: int, count: int, nevents: int) -> int:
    count &= 0xFFFFFFFF
    if count == 0 or count > _MAX_SUBSCRIPTIONS:
        return INVAL
    raw = _read(g, subs, 48 * count)
    ready: list[bytes] = []
    sleep_ns: int | None = None
    for i in range(count):
        userdata, tag = struct.unpack_from("<QB", raw, 48 * i)
        if tag == 0:  # clock
            clock, timeout, _, flags = struct.unpack_from("<IxxxxQQH", raw, 48 * i + 16)
            now = _now(clock)
            if now is None:
                ready.append(struct.pack("<QHBx4xQH6x", userdata, INVAL, tag, 0, 0))
                continue
            wait = max(0, timeout - now) if flags & 1 else timeout
            sleep_ns = wait if sleep_ns is None else min(sleep_ns, wait)
            ready.append(struct.pack("<QHBx4xQH6x", userdata, SUCCESS, tag, 0, 0))
        else:  # fd_read / fd_write: stdin is at EOF, stdout and stderr always take more
            (fd,) = struct.unpack_from("<I", raw, 48 * i + 16)
            ok = (tag == 1 and fd == 0) or (tag == 2 and fd in (1, 2))
            ready.append(struct.pack("<QHBx4xQH6x", userdata, SUCCESS if ok else BADF, tag,
                                     0, 1 if ok and tag == 1 else 0))
            sleep_ns = 0
    if sleep_ns:
        if sleep_ns / 1e9 > g.wasi_seconds_left():
            # timeout() completes the sentence: "... ran past N ms".
            g.wasi_timeout(f"poll_oneoff's {sleep_ns / 1e6:.0f} ms sleep")
        time.sleep(sleep_ns / 1e9)
    _write(g, events, b"".join(ready))
    _write(g, nevents, struct.pack("<I", len(ready)))
    return SUCCESS


def _proc_exit(g: WasiGuest, code: int) -> None:
    g.wasi_exit(code & 0xFFFFFFFF)


def _fd_std(answer: int) -> Callable[..., int]:
    """fds 0-2 answer `answer`; every other fd does not exist."""
    def fn(g: WasiGuest, fd: int, *_: int) -> int:
        return answer if fd in (0, 1, 2) else BADF
    return fn


_IMPLEMENTED: dict[str, Callable[..., Any]] = {
    "fd_write": _fd_write, "fd_read": _fd_read, "clock_time_get": _clock_time_get,
    "clock_res_get": _clock_res_get, "random_get": _random_get,
    "args_sizes_get": _sizes, "environ_sizes_get": _sizes,
    "args_get": lambda g, *_: SUCCESS, "environ_get": lambda g, *_: SUCCESS,
    "fd_fdstat_get": _fdstat, "fd_filestat_get": _filestat, "poll_oneoff": _poll_oneoff,
    "proc_exit": _proc_exit, "sched_yield": lambda g: SUCCESS,
    "fd_close": _fd_std(SUCCESS), "fd_sync": _fd_std(SUCCESS),
    "fd_datasync": _fd_std(SUCCESS), "fd_seek": _fd_std(SPIPE), "fd_tell": _fd_std(SPIPE),
    "fd_fdstat_set_flags": _fd_std(NOTSUP), "fd_prestat_get": _fd_std(BADF),
}


def _answer(name: str) -> int:
    return BADF if name.startswith(("fd_", "path_", "sock_")) else NOSYS


def _wrap(name: str, fn: Callable[..., Any] | None,
          top: Callable[[], WasiGuest]) -> Callable[..., Any]:
    if fn is None:
        errno = _answer(name)
        return lambda *_: errno

    def call(*args: int) -> Any:
        try:
            return fn(top(), *args)
        except _Fault:
            return FAULT
    return call


def define(linker: wasmtime.Linker, top: Callable[[], WasiGuest]) -> None:
    """Define every preview1 function on `linker`; `top()` is the running instance."""
    types = {"i32": wasmtime.ValType.i32(), "i64": wasmtime.ValType.i64()}
    for name, (params, results) in SIGNATURES.items():
        ty = wasmtime.FuncType([types[p] for p in params], [types[r] for r in results])
        linker.define_func(MODULE, name, ty, _wrap(name, _IMPLEMENTED.get(name), top))
