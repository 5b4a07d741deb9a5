"""Filesystem grants: a host folder mapped into a core module's WASI preview 1.

A grant `fs:PATH[:ro|rw]` (read-only unless it says `rw`; PATH absolute; parsed by
`sandbox.fsgrants`) shows the folder to the guest as the preopened directory
`/<basename of PATH>`. The host
serves every file operation itself (`sandbox.wasi`), relative to directory fds it
holds, so nothing a guest names can reach outside the folder:

- a path is split into components; an absolute path, or a `..` that would climb
  above the folder, is refused (ENOTCAPABLE), and `..` inside is resolved
  lexically (sound, because no component may be a symlink);
- every component is opened with `O_NOFOLLOW` relative to the fd of the one before
  (`O_DIRECTORY` for the folders on the way), so a symlink anywhere, and a folder
  swapped for a symlink while the guest works, fails the walk instead of leaving
  the folder;
- only regular files and directories are opened, with `O_NONBLOCK` (a FIFO never
  holds the call) and checked with `fstat` after opening; a regular file with more
  than one hard link is refused (it may be the same inode as a file outside), and
  the guest can create neither links nor symlinks;
- `O_TRUNC` is applied after those checks, never by `open` itself;
- a quota per folder (bytes and entries, `FsQuota`) refuses growth past it with
  EDQUOT and a line in the plugin's log; the bytes read and written in one call are
  bounded too (`max_io_bytes`), past it the call fails with `HostCallLimitExceeded`;
- one instance keeps one `fd_readdir` listing at a time (another fd's is read
  again from the folder when it goes on), so 127 fds of a full folder cannot
  hold hundreds of megabytes of host memory;
- a file whose name goes (unlink, or a rename over it) while an fd still holds it
  keeps its bytes on the disk, so they stay counted until its last fd closes;
- a granted folder inside another granted one counts against the outer one's
  quota (renames between the two are then one folder's too).

A revoked grant stops working at the next operation; a grant added later reaches
new instances (`Plugin.set_grants` drops the idle ones when folder grants change).
Components get the same grants as wasmtime's WASI p2 preopens (`preopen_args`),
read-only whatever the grant says: wasmtime confines those paths, and no quota
could be enforced on their writes.
"""

from __future__ import annotations

import contextlib
import errno as os_errno
import os
import stat
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wasmext.sandbox.fsgrants import FsGrant, FsQuota, fs_grants

__all__ = ["FsTable", "run"]

# WASI preview 1 errno values.
SUCCESS, ACCES, BADF, DQUOT, EXIST, FAULT, INVAL, IO, ISDIR = 0, 2, 8, 19, 20, 21, 28, 29, 31
MFILE, NAMETOOLONG, NOENT, NOTDIR, NOTEMPTY, NOTSUP, PERM, ROFS = 33, 37, 44, 54, 55, 58, 63, 69
XDEV, NOTCAPABLE = 75, 76

_FROM_OS = {os_errno.ENOENT: NOENT, os_errno.EEXIST: EXIST, os_errno.ENOTDIR: NOTDIR,
            os_errno.EISDIR: ISDIR, os_errno.ENOTEMPTY: NOTEMPTY, os_errno.EACCES: ACCES,
            os_errno.EPERM: PERM, os_errno.ENAMETOOLONG: NAMETOOLONG, os_errno.EXDEV: XDEV,
            os_errno.EINVAL: INVAL, os_errno.EBADF: BADF, os_errno.EROFS: ROFS,
            os_errno.EDQUOT: DQUOT, os_errno.ENOSPC: DQUOT,
            # a symlink met with O_NOFOLLOW: the guest may not go there
            os_errno.ELOOP: NOTCAPABLE, os_errno.ENXIO: ACCES, os_errno.EMLINK: PERM}

# Filetypes and the rights every granted fd reports (wasi-libc masks what it asks
# for by the directory's inheriting rights; the host checks access itself).
_DIR, _REGULAR, _SYMLINK, _CHAR_DEVICE, _BLOCK_DEVICE, _UNKNOWN = 3, 4, 7, 2, 1, 0
_ALL_RIGHTS = (1 << 30) - 1
_RIGHT_READ, _RIGHT_WRITE, _RIGHT_SET_SIZE = 1 << 1, 1 << 6, 1 << 22
_O_CREAT, _O_DIRECTORY, _O_EXCL, _O_TRUNC = 1, 2, 4, 8
_FD_APPEND = 1

MAX_OPEN = 128          # guest fds per instance, preopens included
MAX_PATH_BYTES = 4096
MAX_COMPONENTS = 64
MAX_NAME_BYTES = 255
_CHUNK = 1 << 20        # one os.read at most: a guest's length never sizes a host buffer
_BASE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _BASE_FLAGS


class _Usage:
    """A folder's size and entry count, counted once per process and then kept up to
    date by this host's own changes (another writer's changes are not seen).

    Files open through any instance are counted by inode: a name removed while one is
    open frees no disk, so its bytes are given back only when its last fd closes."""

    def __init__(self, root: str, quota: FsQuota) -> None:
        self.lock = threading.Lock()
        self.bytes, self.files = 0, 0
        self.open: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> open fds
        self.orphans: set[tuple[int, int]] = set()  # open inodes whose name is gone
        stack = [root]
        while stack and self.files <= quota.max_files:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        self.files += 1
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            self.bytes += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue

    def grow(self, nbytes: int, files: int, quota: FsQuota) -> bool:
        """Take `nbytes` and `files` more; False (and nothing taken) past the quota."""
        with self.lock:
            if (nbytes > 0 and self.bytes + nbytes > quota.max_bytes) or \
                    (files > 0 and self.files + files > quota.max_files):
                return False
            self.bytes = max(0, self.bytes + nbytes)
            self.files = max(0, self.files + files)
            return True

    def opened(self, inode: tuple[int, int]) -> None:
        """An fd now holds the regular file `inode`."""
        with self.lock:
            self.open[inode] = self.open.get(inode, 0) + 1

    def closed(self, inode: tuple[int, int], size: int) -> None:
        """An fd of `inode` (now `size` bytes) closed: an orphan's bytes come back with
        its last one."""
        with self.lock:
            left = self.open.get(inode, 0) - 1
            if left > 0:
                self.open[inode] = left
                return
            self.open.pop(inode, None)
            if inode in self.orphans:
                self.orphans.discard(inode)
                self.bytes = max(0, self.bytes - size)

    def removed(self, info: os.stat_result) -> None:
        """A name of the file `info` describes is gone: one entry less, and its bytes
        too when that was its last name and no fd holds it."""
        inode = (info.st_dev, info.st_ino)
        freed = stat.S_ISREG(info.st_mode) and info.st_nlink == 1
        with self.lock:
            self.files = max(0, self.files - 1)
            if not freed:
                return
            if inode in self.open:
                self.orphans.add(inode)
            else:
                self.bytes = max(0, self.bytes - info.st_size)


_usages: dict[tuple[int, int, FsQuota], _Usage] = {}
_usages_lock = threading.Lock()


def _usage_of(fd: int, root: str, quota: FsQuota) -> _Usage:
    info = os.fstat(fd)
    key = (info.st_dev, info.st_ino, quota)
    with _usages_lock:
        usage = _usages.get(key)
        if usage is None:
            usage = _usages[key] = _Usage(root, quota)
        return usage


def _outermost(grant: FsGrant, mapped: list[FsGrant]) -> str | None:
    """The outermost other mapped folder holding `grant`'s, or None: a folder granted
    inside another counts against the outer one's quota (else each of the two would
    hold a full quota, and the outer folder twice its own)."""
    holders = [g.path for g in mapped if grant.path.startswith(g.path.rstrip("/") + "/")]
    return min(holders, key=len) if holders else None


def _usage_of_path(root: str, quota: FsQuota) -> _Usage:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _usage_of(fd, root, quota)
    finally:
        os.close(fd)


class _Fault(Exception):
    """An errno for the guest, raised from deep inside an operation."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _Open:
    """One guest fd: the host fd, its folder grant and what the guest may do with it."""

    fd: int
    is_dir: bool
    grant: FsGrant
    usage: _Usage
    readable: bool = True
    writable: bool = False
    append: bool = False
    preopen: bool = False
    listing: list[tuple[str, int, int]] | None = None  # fd_readdir's (name, ino, type)
    inode: tuple[int, int] | None = None  # a regular file's, counted in `usage.open`

    def release(self) -> None:
        """Close the host fd, and tell the folder's usage its file has one fd less."""
        size = 0
        if self.inode is not None:
            with contextlib.suppress(OSError):
                size = os.fstat(self.fd).st_size
        try:
            os.close(self.fd)
        finally:
            if self.inode is not None:
                self.usage.closed(self.inode, size)
                self.inode = None


def _close_all(files: dict[int, _Open]) -> None:
    for entry in files.values():
        with contextlib.suppress(OSError):
            entry.release()
    files.clear()


def _filetype(mode: int) -> int:
    if stat.S_ISDIR(mode):
        return _DIR
    if stat.S_ISREG(mode):
        return _REGULAR
    if stat.S_ISLNK(mode):
        return _SYMLINK
    if stat.S_ISCHR(mode):
        return _CHAR_DEVICE
    return _BLOCK_DEVICE if stat.S_ISBLK(mode) else _UNKNOWN


def _filestat(info: os.stat_result) -> bytes:
    return struct.pack("<QQBxxxxxxxQQQQQ", info.st_dev, info.st_ino, _filetype(info.st_mode),
                       info.st_nlink, info.st_size, info.st_atime_ns, info.st_mtime_ns,
                       info.st_ctime_ns)


def _components(raw: bytes) -> list[str]:
    """The path's components with `.` gone and `..` resolved; refuses escapes."""
    if len(raw) > MAX_PATH_BYTES:
        raise _Fault(NAMETOOLONG)
    if b"\0" in raw:
        raise _Fault(INVAL)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Fault(INVAL) from None
    if text.startswith("/"):
        raise _Fault(NOTCAPABLE)
    parts: list[str] = []
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise _Fault(NOTCAPABLE)
            parts.pop()
            continue
        if len(part.encode()) > MAX_NAME_BYTES:
            raise _Fault(NAMETOOLONG)
        parts.append(part)
    if len(parts) > MAX_COMPONENTS:
        raise _Fault(NAMETOOLONG)
    return parts


class _Walk:
    """The folder holding a path's last component, opened component by component
    with O_NOFOLLOW from a granted directory fd; `name` is "." for that folder itself."""

    def __init__(self, base: int, raw: bytes) -> None:
        parts = _components(raw)
        self.name = parts.pop() if parts else "."
        self.fd, self._owned = base, False
        try:
            for part in parts:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.fd)
                self.close()
                self.fd, self._owned = fd, True
        except OSError as exc:
            self.close()
            raise _Fault(_FROM_OS.get(exc.errno or 0, IO)) from None

    def lstat(self) -> os.stat_result | None:
        """The last component's own status (a symlink is not followed); None: absent."""
        try:
            return os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def close(self) -> None:
        """Close the folder fd the walk opened (never the granted one it started from)."""
        if self._owned:
            os.close(self.fd)
            self._owned = False

    def __enter__(self) -> _Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FsTable:
    """The file descriptors of one instance: its preopened folders and what it opened.

    `grants()` answers the plugin's grants now (a revoked folder stops at once);
    `io(n)` charges n bytes of file I/O to the running call; `note(text)` writes a
    line to the plugin's log."""

    def __init__(self, grants: Callable[[], frozenset[str]], quota: FsQuota,
                 io: Callable[[int], None], note: Callable[[str], None]) -> None:
        self._grants = grants
        self.quota = quota
        self._io = io
        self._note = note
        self.files: dict[int, _Open] = {}
        self.names: dict[int, bytes] = {}  # preopen fd -> guest path
        # The one fd whose fd_readdir listing is kept: a listing of a full folder is
        # megabytes of host memory, so 127 fds of one folder must not each keep one.
        self._listed: _Open | None = None
        weakref.finalize(self, _close_all, self.files)
        fd = 3
        mapped = fs_grants(grants())
        for grant in mapped:
            try:
                root = os.open(grant.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                note(f"fs grant {grant.path}: cannot open the folder ({exc.strerror}); "
                     "not mapped")
                continue
            try:
                usage = _usage_of(root, grant.path, quota) if (outer := _outermost(
                    grant, mapped)) is None else _usage_of_path(outer, quota)
            except OSError:
                os.close(root)
                continue
            self.files[fd] = _Open(root, True, grant, usage, writable=grant.writable,
                                   preopen=True)
            self.names[fd] = grant.guest_path.encode()
            fd += 1

    # -- fds -------------------------------------------------------------------------

    def close_all(self) -> None:
        """Close every host fd (the instance is being thrown away)."""
        self._listed = None
        _close_all(self.files)
        self.names.clear()

    def has(self, fd: int) -> bool:
        """Whether `fd` is one of this table's."""
        return fd in self.files

    def entry(self, fd: int) -> _Open:
        """The open fd `fd`, while its grant still holds."""
        entry = self.files.get(fd)
        if entry is None:
            raise _Fault(BADF)
        if entry.grant.capability not in self._grants():
            raise _Fault(NOTCAPABLE)
        return entry

    def _add(self, entry: _Open) -> int:
        if len(self.files) >= MAX_OPEN:
            entry.release()
            raise _Fault(MFILE)
        fd = 3
        while fd in self.files:
            fd += 1
        self.files[fd] = entry
        return fd

    def close(self, fd: int) -> int:
        """fd_close."""
        entry = self.files.pop(fd, None)
        if entry is None:
            return BADF
        self.names.pop(fd, None)
        if entry is self._listed:
            self._listed = None
        entry.release()
        return SUCCESS

    def prestat(self, fd: int) -> bytes:
        """fd_prestat_get's answer: a directory preopen and its name's length."""
        name = self.names.get(fd)
        if name is None:
            raise _Fault(BADF)
        return struct.pack("<BxxxI", 0, len(name))

    def prestat_name(self, fd: int) -> bytes:
        """fd_prestat_dir_name's answer: the guest path of a preopen."""
        name = self.names.get(fd)
        if name is None:
            raise _Fault(BADF)
        return name

    def fdstat(self, fd: int) -> bytes:
        """fd_fdstat_get's answer for an fd of this table."""
        entry = self.entry(fd)
        flags = _FD_APPEND if entry.append else 0
        return struct.pack("<BxHxxxxQQ", _DIR if entry.is_dir else _REGULAR, flags,
                           _ALL_RIGHTS, _ALL_RIGHTS)

    def fstat(self, fd: int) -> bytes:
        """fd_filestat_get's answer."""
        return _filestat(os.fstat(self.entry(fd).fd))

    # -- opening ---------------------------------------------------------------------

    def open(self, dirfd: int, raw: bytes, oflags: int, rights: int, fdflags: int) -> int:
        """path_open: the new guest fd."""
        base = self.entry(dirfd)
        if not base.is_dir:
            raise _Fault(NOTDIR)
        want_dir = bool(oflags & _O_DIRECTORY)
        write = bool(rights & (_RIGHT_WRITE | _RIGHT_SET_SIZE)) and not want_dir
        read = bool(rights & _RIGHT_READ) or not write
        create, trunc = bool(oflags & _O_CREAT), bool(oflags & _O_TRUNC)
        if (write or create or trunc or fdflags & _FD_APPEND) and not base.grant.writable:
            raise _Fault(ROFS)
        with _Walk(base.fd, raw) as walk:
            before = walk.lstat()
            if before is not None:
                if stat.S_ISLNK(before.st_mode):
                    raise _Fault(NOTCAPABLE)
                if not (stat.S_ISREG(before.st_mode) or stat.S_ISDIR(before.st_mode)):
                    raise _Fault(ACCES)  # FIFOs, devices, sockets: never opened
                if create and oflags & _O_EXCL:
                    raise _Fault(EXIST)
                if stat.S_ISDIR(before.st_mode) and (write or trunc):
                    raise _Fault(ISDIR)
            elif not create:
                raise _Fault(NOENT)
            elif not base.usage.grow(0, 1, self.quota):
                self._over(base, "entries")
            flags = _BASE_FLAGS | (os.O_DIRECTORY if want_dir else 0)
            flags |= (os.O_RDWR if read else os.O_WRONLY) if write else os.O_RDONLY
            if write and fdflags & _FD_APPEND:
                flags |= os.O_APPEND
            if create and before is None:
                flags |= os.O_CREAT | os.O_EXCL
            try:
                fd = os.open(walk.name, flags, 0o644, dir_fd=walk.fd)
            except OSError as exc:
                if create and before is None:
                    base.usage.grow(0, -1, self.quota)
                raise _Fault(_FROM_OS.get(exc.errno or 0, IO)) from None
        try:
            info = os.fstat(fd)
            regular = stat.S_ISREG(info.st_mode)
            if not (regular or stat.S_ISDIR(info.st_mode)):
                raise _Fault(ACCES)  # swapped for a FIFO or device after the check
            if regular and info.st_nlink > 1:
                raise _Fault(ACCES)  # may be the inode of a file outside the folder
            if want_dir and regular:
                raise _Fault(NOTDIR)
            if trunc and regular and info.st_size:
                os.ftruncate(fd, 0)
                base.usage.grow(-info.st_size, 0, self.quota)
        except BaseException:
            os.close(fd)
            raise
        inode = (info.st_dev, info.st_ino) if regular else None
        if inode is not None:
            base.usage.opened(inode)
        return self._add(_Open(fd, not regular, base.grant, base.usage, readable=read,
                               writable=write, append=bool(fdflags & _FD_APPEND),
                               inode=inode))

    def _over(self, entry: _Open, what: str) -> None:
        q = self.quota
        self._note(f"fs quota of {entry.grant.guest_path}: over its {q.max_files} entries"
                   if what == "entries" else
                   f"fs quota of {entry.grant.guest_path}: over its {q.max_bytes} bytes")
        raise _Fault(DQUOT)

    # -- reading and writing ----------------------------------------------------------

    def _file(self, fd: int, writing: bool) -> _Open:
        entry = self.entry(fd)
        if entry.is_dir:
            raise _Fault(ISDIR)
        if writing and not (entry.writable and entry.grant.writable):
            raise _Fault(BADF)
        if not writing and not entry.readable:
            raise _Fault(BADF)
        return entry

    def read(self, fd: int, lengths: list[int], at: int | None = None) -> list[bytes]:
        """fd_read / fd_pread: up to each length, stopping at end of file."""
        entry = self._file(fd, False)
        out: list[bytes] = []
        for want in lengths:
            parts: list[bytes] = []
            left = want
            while left > 0:
                n = min(left, _CHUNK)
                chunk = os.read(entry.fd, n) if at is None else os.pread(entry.fd, n, at)
                self._io(len(chunk))  # what was read: a big buffer on a small file is cheap
                if at is not None:
                    at += len(chunk)
                parts.append(chunk)
                left -= len(chunk)
                if len(chunk) < n:
                    out.append(b"".join(parts))
                    return out
            out.append(b"".join(parts))
        return out

    def write(self, fd: int, data: bytes, at: int | None = None) -> int:
        """fd_write / fd_pwrite: all of `data`, or EDQUOT past the folder's quota."""
        entry = self._file(fd, True)
        self._io(len(data))
        info = os.fstat(entry.fd)
        if entry.append:  # Linux appends a pwrite on an O_APPEND fd too, whatever its offset
            at = info.st_size
        elif at is None:
            at = os.lseek(entry.fd, 0, os.SEEK_CUR)
        growth = max(0, at + len(data) - info.st_size)
        if growth and not entry.usage.grow(growth, 0, self.quota):
            self._over(entry, "bytes")
        done = 0
        view = memoryview(data)
        while done < len(data):
            if entry.append:
                n = os.write(entry.fd, view[done:])
            else:
                n = os.pwrite(entry.fd, view[done:], at + done)
            done += n
        if not entry.append:
            os.lseek(entry.fd, at + done, os.SEEK_SET)
        return done

    def seek(self, fd: int, offset: int, whence: int) -> int:
        """fd_seek: the new offset."""
        entry = self.entry(fd)
        if entry.is_dir:
            raise _Fault(ISDIR)
        if whence not in (0, 1, 2):
            raise _Fault(INVAL)
        try:
            return os.lseek(entry.fd, offset, whence)
        except OSError as exc:
            raise _Fault(_FROM_OS.get(exc.errno or 0, IO)) from None

    def set_size(self, fd: int, size: int) -> None:
        """fd_filestat_set_size, within the quota."""
        entry = self._file(fd, True)
        old = os.fstat(entry.fd).st_size
        if size > old and not entry.usage.grow(size - old, 0, self.quota):
            self._over(entry, "bytes")
        os.ftruncate(entry.fd, size)
        if size < old:
            entry.usage.grow(size - old, 0, self.quota)

    def sync(self, fd: int) -> None:
        """fd_sync / fd_datasync."""
        entry = self.entry(fd)
        if entry.writable and not entry.is_dir:
            os.fsync(entry.fd)

    def readdir(self, fd: int, size: int, cookie: int) -> bytes:
        """fd_readdir: dirents from `cookie`, cut at `size` bytes."""
        entry = self.entry(fd)
        if not entry.is_dir:
            raise _Fault(NOTDIR)
        if cookie == 0 or entry.listing is None:
            if self._listed is not None and self._listed is not entry:
                self._listed.listing = None  # read again from the folder if asked for
            self._listed = entry
            listing: list[tuple[str, int, int]] = []
            with os.scandir(entry.fd) as it:
                for item in it:
                    if len(listing) > self.quota.max_files:
                        break
                    kind = _DIR if item.is_dir(follow_symlinks=False) else \
                        _SYMLINK if item.is_symlink() else \
                        _REGULAR if item.is_file(follow_symlinks=False) else _UNKNOWN
                    listing.append((item.name, item.inode(), kind))
            entry.listing = listing
        out = bytearray()
        for index in range(cookie, len(entry.listing)):
            if len(out) >= size:
                break
            name, ino, kind = entry.listing[index]
            raw = name.encode("utf-8", "surrogateescape")
            out += struct.pack("<QQIB3x", index + 1, ino, len(raw), kind) + raw
        self._io(min(len(out), size))
        return bytes(out[:size])

    # -- the folder ------------------------------------------------------------------

    def _dir(self, fd: int, changing: bool) -> _Open:
        entry = self.entry(fd)
        if not entry.is_dir:
            raise _Fault(NOTDIR)
        if changing and not entry.grant.writable:
            raise _Fault(ROFS)
        return entry

    def path_stat(self, fd: int, raw: bytes) -> bytes:
        """path_filestat_get (a symlink is described, never followed)."""
        with _Walk(self._dir(fd, False).fd, raw) as walk:
            info = walk.lstat()
        if info is None:
            raise _Fault(NOENT)
        return _filestat(info)

    def mkdir(self, fd: int, raw: bytes) -> None:
        """path_create_directory, counted as an entry of the quota."""
        base = self._dir(fd, True)
        with _Walk(base.fd, raw) as walk:
            if walk.name == ".":
                raise _Fault(EXIST)
            if not base.usage.grow(0, 1, self.quota):
                self._over(base, "entries")
            try:
                os.mkdir(walk.name, 0o755, dir_fd=walk.fd)
            except OSError:
                base.usage.grow(0, -1, self.quota)
                raise

    def unlink(self, fd: int, raw: bytes) -> None:
        """path_unlink_file (a symlink is removed itself)."""
        base = self._dir(fd, True)
        with _Walk(base.fd, raw) as walk:
            info = walk.lstat()
            if info is None:
                raise _Fault(NOENT)
            if stat.S_ISDIR(info.st_mode):
                raise _Fault(ISDIR)
            os.unlink(walk.name, dir_fd=walk.fd)
        base.usage.removed(info)

    def rmdir(self, fd: int, raw: bytes) -> None:
        """path_remove_directory."""
        base = self._dir(fd, True)
        with _Walk(base.fd, raw) as walk:
            if walk.name == ".":
                raise _Fault(INVAL)
            os.rmdir(walk.name, dir_fd=walk.fd)
        base.usage.grow(0, -1, self.quota)

    def rename(self, fd: int, raw: bytes, new_fd: int, new_raw: bytes) -> None:
        """path_rename within one granted folder (between two: EXDEV)."""
        base, dest = self._dir(fd, True), self._dir(new_fd, True)
        if base.usage is not dest.usage:
            raise _Fault(XDEV)
        with _Walk(base.fd, raw) as src, _Walk(dest.fd, new_raw) as dst:
            if "." in (src.name, dst.name):
                raise _Fault(INVAL)
            if src.lstat() is None:
                raise _Fault(NOENT)
            replaced = dst.lstat()
            os.rename(src.name, dst.name, src_dir_fd=src.fd, dst_dir_fd=dst.fd)
        if replaced is not None:
            base.usage.removed(replaced)


def run(op: Callable[[], Any]) -> tuple[int, Any]:
    """Run a table operation: (SUCCESS, its value), or (the WASI errno, None)."""
    try:
        return SUCCESS, op()
    except _Fault as fault:
        return fault.code, None
    except OSError as exc:
        return _FROM_OS.get(exc.errno or 0, IO), None
