"""A minimal, deny-by-default `wasi_snapshot_preview1`, written here.

wasmtime's own WASI runs blocking work on a tokio runtime: a guest could
sleep in `poll_oneoff` past its deadline (epochs do not reach host code), and
an `fd_read` on an unknown fd or a `path_open` left a worker thread that
panicked when the process exited (SIGABRT after the right answer). Plugins
need little of WASI, so the host links these functions instead:

- `fd_write` to fd 1 and 2 goes to the plugin log; `fd_read` of fd 0 is EOF;
- with a folder grant (`fs:PATH[:ro|rw]`), the fd, path and directory calls on
  its preopen and what the guest opens there, served by `sandbox.wasifs`, which
  never leaves the folder; their time counts as host-call time;
- `clock_time_get`, `clock_res_get`, `random_get`, `sched_yield`;
- `args_*` and `environ_*` answer empty; `fd_fdstat_get`/`fd_filestat_get`
  describe fds 0-2 as character devices, which libc startup asks for;
- `poll_oneoff` sleeps only within the call's deadline: a sleep that would
  run past it fails the call with `Timeout` at once;
- `proc_exit` ends the call with `GuestTrap`;
- everything else answers EBADF (fd, path and socket calls on fds that do not
  exist; there are no sockets), EPERM (links and symlinks) or ENOSYS, without
  touching the host.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

import wasmtime

from wasmext.sandbox import hosttramp, wasifs
from wasmext.sandbox.wasifs import FsTable

__all__ = ["SIGNATURES", "WasiGuest", "define"]

MODULE = "wasi_snapshot_preview1"
SUCCESS, BADF, FAULT, INVAL, NOSYS, NOTSUP, PERM, SPIPE = 0, 8, 21, 28, 52, 58, 63, 70
_CHAR_DEVICE = 2
_MAX_SUBSCRIPTIONS = 64
_MAX_IOVECS = 1024
MAX_WRITE = 1 << 20  # bytes one fd_write or fd_pwrite takes

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

    def wasi_fs(self) -> FsTable | None:
        """The instance's granted folders and open files; None without a folder grant."""
        ...

    def wasi_fs_done(self, started: float) -> None:
        """A file operation begun at `started` (perf_counter) ended: charge its time."""
        ...


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


def _gather(guest: WasiGuest, iovs: int, count: int) -> bytes:
    """The bytes of an fd_write, at most MAX_WRITE of them: 1024 iovecs naming all of
    memory would otherwise copy 1024 times its size (a short write is the answer; the
    guest's libc writes the rest)."""
    parts, left = [], MAX_WRITE
    for ptr, length in _iovecs(guest, iovs, count):
        if left <= 0:
            break
        parts.append(_read(guest, ptr, min(length, left)))
        left -= len(parts[-1])
    return b"".join(parts)


def _iovecs(guest: WasiGuest, iovs: int, count: int) -> list[tuple[int, int]]:
    if count & 0xFFFFFFFF > _MAX_IOVECS:
        raise _Fault
    raw = _read(guest, iovs, 8 * count)
    return [struct.unpack_from("<II", raw, 8 * i) for i in range(count)]


def _fs(g: WasiGuest, fd: int, work: Callable[[FsTable], Any]) -> tuple[int, Any]:
    """Run `work` on the table holding `fd`: (errno, value); EBADF when none holds it."""
    fs = g.wasi_fs()
    if fs is None or not fs.has(fd & 0xFFFFFFFF):
        return BADF, None
    started = time.perf_counter()
    try:
        return wasifs.run(lambda: work(fs))
    finally:
        g.wasi_fs_done(started)


def _known(g: WasiGuest, fd: int) -> bool:
    """Whether `fd` is a granted file's (checked before reading the guest's buffers)."""
    fs = g.wasi_fs() if fd & 0xFFFFFFFF > 2 else None
    return fs is not None and fs.has(fd & 0xFFFFFFFF)


def _fd_write(g: WasiGuest, fd: int, iovs: int, count: int, nwritten: int) -> int:
    if fd not in (1, 2) and not _known(g, fd):
        return BADF
    data = _gather(g, iovs, count)
    if fd in (1, 2):
        g.wasi_output(fd, data)
        _write(g, nwritten, struct.pack("<I", len(data)))
        return SUCCESS
    code, n = _fs(g, fd, lambda fs: fs.write(fd, data))
    if code == SUCCESS:
        _write(g, nwritten, struct.pack("<I", n))
    return int(code)


def _fd_pwrite(g: WasiGuest, fd: int, iovs: int, count: int, offset: int, out: int) -> int:
    if not _known(g, fd):
        return BADF
    data = _gather(g, iovs, count)
    code, n = _fs(g, fd, lambda fs: fs.write(fd, data, offset & (2**63 - 1)))
    if code == SUCCESS:
        _write(g, out, struct.pack("<I", n))
    return int(code)


def _checked_iovecs(g: WasiGuest, iovs: int, count: int) -> list[tuple[int, int]]:
    """The guest's read buffers, each inside its memory (else EFAULT before any read)."""
    vecs = _iovecs(g, iovs, count)
    mem = g.wasi_memory()
    if mem is None or any(p + n > mem.size() for p, n in vecs):
        raise _Fault
    return vecs


def _fill(g: WasiGuest, vecs: list[tuple[int, int]], chunks: list[bytes], out: int) -> None:
    for (p, _), chunk in zip(vecs, chunks, strict=False):
        _write(g, p, chunk)
    _write(g, out, struct.pack("<I", sum(len(c) for c in chunks)))


def _fd_read(g: WasiGuest, fd: int, iovs: int, count: int, nread: int) -> int:
    if fd == 0:
        _write(g, nread, b"\0\0\0\0")  # stdin is empty
        return SUCCESS
    if not _known(g, fd):
        return BADF
    vecs = _checked_iovecs(g, iovs, count)
    code, chunks = _fs(g, fd, lambda fs: fs.read(fd, [n for _, n in vecs]))
    if code == SUCCESS:
        _fill(g, vecs, chunks, nread)
    return int(code)


def _fd_pread(g: WasiGuest, fd: int, iovs: int, count: int, offset: int, nread: int) -> int:
    if not _known(g, fd):
        return BADF
    vecs = _checked_iovecs(g, iovs, count)
    code, chunks = _fs(g, fd, lambda fs: fs.read(fd, [n for _, n in vecs],
                                                 offset & (2**63 - 1)))
    if code == SUCCESS:
        _fill(g, vecs, chunks, nread)
    return int(code)


def _fd_seek(g: WasiGuest, fd: int, offset: int, whence: int, out: int) -> int:
    if fd in (0, 1, 2):
        return SPIPE
    code, pos = _fs(g, fd, lambda fs: fs.seek(fd, offset, whence & 0xFF))
    if code == SUCCESS:
        _write(g, out, struct.pack("<Q", pos))
    return int(code)


def _fd_tell(g: WasiGuest, fd: int, out: int) -> int:
    return _fd_seek(g, fd, 0, 1, out)


def _fd_close(g: WasiGuest, fd: int) -> int:
    if fd in (0, 1, 2):
        return SUCCESS
    return int(_fs(g, fd, lambda fs: fs.close(fd))[0])


def _fd_sync(g: WasiGuest, fd: int) -> int:
    if fd in (0, 1, 2):
        return SUCCESS
    return int(_fs(g, fd, lambda fs: fs.sync(fd))[0])


def _fd_prestat_get(g: WasiGuest, fd: int, out: int) -> int:
    code, raw = _fs(g, fd, lambda fs: fs.prestat(fd))
    if code == SUCCESS:
        _write(g, out, raw)
    return int(code)


def _fd_prestat_dir_name(g: WasiGuest, fd: int, ptr: int, length: int) -> int:
    code, name = _fs(g, fd, lambda fs: fs.prestat_name(fd))
    if code == SUCCESS:
        _write(g, ptr, name[:length & 0xFFFFFFFF])
    return int(code)


def _fd_readdir(g: WasiGuest, fd: int, buf: int, size: int, cookie: int, used: int) -> int:
    size &= 0xFFFFFFFF
    mem = g.wasi_memory()
    if mem is None or (buf & 0xFFFFFFFF) + size > mem.size():
        return FAULT
    code, raw = _fs(g, fd, lambda fs: fs.readdir(fd, size, cookie & (2**63 - 1)))
    if code == SUCCESS:
        _write(g, buf, raw)
        _write(g, used, struct.pack("<I", len(raw)))
    return int(code)


def _fd_filestat_set_size(g: WasiGuest, fd: int, size: int) -> int:
    return int(_fs(g, fd, lambda fs: fs.set_size(fd, size & (2**63 - 1)))[0])


def _path_open(g: WasiGuest, fd: int, dirflags: int, path: int, length: int, oflags: int,
               rights: int, inheriting: int, fdflags: int, out: int) -> int:
    raw = _read(g, path, length & 0xFFFFFFFF)
    code, new = _fs(g, fd, lambda fs: fs.open(fd, raw, oflags & 0xFFFF, rights,
                                              fdflags & 0xFFFF))
    if code == SUCCESS:
        _write(g, out, struct.pack("<I", new))
    return int(code)


def _path_filestat_get(g: WasiGuest, fd: int, flags: int, path: int, length: int,
                       out: int) -> int:
    raw = _read(g, path, length & 0xFFFFFFFF)
    code, info = _fs(g, fd, lambda fs: fs.path_stat(fd, raw))
    if code == SUCCESS:
        _write(g, out, info)
    return int(code)


def _path_op(name: str) -> Callable[..., int]:
    """path_create_directory, path_unlink_file, path_remove_directory: (fd, path, len)."""
    def fn(g: WasiGuest, fd: int, path: int, length: int) -> int:
        raw = _read(g, path, length & 0xFFFFFFFF)
        return int(_fs(g, fd, lambda fs: getattr(fs, name)(fd, raw))[0])
    return fn


def _path_rename(g: WasiGuest, fd: int, path: int, length: int, new_fd: int, new_path: int,
                 new_length: int) -> int:
    raw = _read(g, path, length & 0xFFFFFFFF)
    new_raw = _read(g, new_path, new_length & 0xFFFFFFFF)
    fs = g.wasi_fs()
    if fs is None or not fs.has(new_fd & 0xFFFFFFFF):
        return BADF
    return int(_fs(g, fd, lambda fs: fs.rename(fd, raw, new_fd, new_raw))[0])


def _on_files(answer: int, stdio: int = BADF) -> Callable[..., int]:
    """A call that takes an fd first: `answer` for granted files' fds, `stdio` for fds
    0-2, EBADF for every other (a hint, such as fd_advise, succeeds doing nothing)."""
    def fn(g: WasiGuest, fd: int, *_: int) -> int:
        if fd in (0, 1, 2):
            return stdio
        return answer if _known(g, fd) else BADF
    return fn


def _no_links(g: WasiGuest, *_: int) -> int:
    """path_link and path_symlink: a link could point anywhere; never made."""
    return PERM if g.wasi_fs() is not None else BADF


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
        code, raw = _fs(g, fd, lambda fs: fs.fdstat(fd))
        if code == SUCCESS:
            _write(g, out, raw)
        return int(code)
    rights = (1 << 1) if fd == 0 else (1 << 6)  # fd_read or fd_write
    _write(g, out, struct.pack("<BxHxxxxQQ", _CHAR_DEVICE, 0, rights, 0))
    return SUCCESS


def _filestat(g: WasiGuest, fd: int, out: int) -> int:
    if fd not in (0, 1, 2):
        code, raw = _fs(g, fd, lambda fs: fs.fstat(fd))
        if code == SUCCESS:
            _write(g, out, raw)
        return int(code)
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
        else:  # fd_read / fd_write: stdin is at EOF, stdout and stderr always take more,
            # granted files never wait
            (fd,) = struct.unpack_from("<I", raw, 48 * i + 16)
            fs = g.wasi_fs() if fd > 2 else None
            ok = (tag == 1 and fd == 0) or (tag == 2 and fd in (1, 2)) or \
                (fs is not None and fs.has(fd))
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


_IMPLEMENTED: dict[str, Callable[..., Any]] = {
    "fd_write": _fd_write, "fd_read": _fd_read, "clock_time_get": _clock_time_get,
    "clock_res_get": _clock_res_get, "random_get": _random_get,
    "args_sizes_get": _sizes, "environ_sizes_get": _sizes,
    "args_get": lambda g, *_: SUCCESS, "environ_get": lambda g, *_: SUCCESS,
    "fd_fdstat_get": _fdstat, "fd_filestat_get": _filestat, "poll_oneoff": _poll_oneoff,
    "proc_exit": _proc_exit, "sched_yield": lambda g: SUCCESS,
    "fd_close": _fd_close, "fd_sync": _fd_sync, "fd_datasync": _fd_sync,
    "fd_seek": _fd_seek, "fd_tell": _fd_tell, "fd_fdstat_set_flags": _on_files(NOTSUP, NOTSUP),
    "fd_advise": _on_files(SUCCESS), "fd_allocate": _on_files(NOTSUP),
    "fd_filestat_set_times": _on_files(NOTSUP), "path_filestat_set_times": _on_files(NOTSUP),
    "path_readlink": _on_files(NOTSUP),
    "fd_prestat_get": _fd_prestat_get, "fd_prestat_dir_name": _fd_prestat_dir_name,
    "fd_pread": _fd_pread, "fd_pwrite": _fd_pwrite, "fd_readdir": _fd_readdir,
    "fd_filestat_set_size": _fd_filestat_set_size, "path_open": _path_open,
    "path_filestat_get": _path_filestat_get,
    "path_create_directory": _path_op("mkdir"), "path_unlink_file": _path_op("unlink"),
    "path_remove_directory": _path_op("rmdir"), "path_rename": _path_rename,
    "path_link": _no_links, "path_symlink": _no_links,
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


def define(linker: wasmtime.Linker, top: Callable[[], WasiGuest], fast: bool = True) -> None:
    """Define every preview1 function on `linker`; `top()` is the running instance.

    `fast`: through the cached trampoline (`hosttramp`) when this wasmtime allows it
    (a file read is five WASI calls: the public API's `Val` boxing was most of it)."""
    types = {"i32": wasmtime.ValType.i32(), "i64": wasmtime.ValType.i64()}
    for name, (params, results) in SIGNATURES.items():
        ty = wasmtime.FuncType([types[p] for p in params], [types[r] for r in results])
        fn = _wrap(name, _IMPLEMENTED.get(name), top)
        if not (fast and hosttramp.define(linker, MODULE, name, ty, fn)):
            hosttramp.define_public(linker, MODULE, name, ty, fn)
