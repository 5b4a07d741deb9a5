"""Writing files a user relies on: all or nothing, whatever moment the process dies.

`atomic_write(path, data)` (and `atomic_open(path)` for writers that stream)
writes a temporary file in the target's folder, flushes it to disk, renames it
over the target and flushes the folder. A reader, or the next run after a
`kill -9` or a power loss, finds the complete old file or the complete new one,
never a truncated or empty file. On an error the temporary file is removed and
the old file is untouched; only a killed process can leave a hidden
`.<name>.tmp-*` file behind, never the target half-written.

Reading is the other half: `read_regular(path, max_bytes)` is how the host reads
every file it trusts to be a file (config, plugin.toml, policy, registry,
approvals, enable state, token and secret files, modules). A FIFO, device,
socket or folder under such a name is refused with `UnsafeFile`, never waited on
or read (opened without blocking, checked before and after opening), and so is
a file larger than the reader's cap, before its bytes are read.

A leaf module: it imports only the error classes of wasmext.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from wasmext.errors import UnsafeFile

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one writer at a time is the user's care
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_open", "atomic_write", "durable_replace", "fsync_dir", "locked",
           "read_regular", "replace_dir"]

_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


def _not_regular(path: str | os.PathLike[str], mode: int) -> UnsafeFile | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return UnsafeFile(path, f"not a regular file ({kind})")


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them.

    Raises UnsafeFile (an OSError) for a FIFO, device, socket or folder and for a
    file over `max_bytes`, without waiting or reading; other OSErrors (missing,
    no permission) as `open` raises them."""
    # stat first: opening some devices has effects of its own, even without reading.
    refused = _not_regular(path, os.stat(path).st_mode)
    if refused is not None:
        raise refused
    fd = os.open(path, _READ_FLAGS)
    try:
        info = os.fstat(fd)  # what was opened, should the name have been swapped
        refused = _not_regular(path, info.st_mode)
        if refused is not None:
            raise refused
        if info.st_size > max_bytes:
            raise UnsafeFile(path, f"larger than {max_bytes} bytes", too_large=True)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:  # a file growing while it is read stops at the cap too
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_bytes:
        raise UnsafeFile(path, f"larger than {max_bytes} bytes", too_large=True)
    return b"".join(chunks)


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk; a no-op where
    folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


def durable_replace(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Flush `tmp` (a file another program wrote) to disk, rename it over `target` in the
    same folder, and flush the folder: the target is the old file or the new one."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_dir(Path(target).parent)


@contextmanager
def atomic_open(path: str | os.PathLike[str], *, perm: int = 0o644) -> Iterator[IO[bytes]]:
    """A binary file to write `path` through: it replaces `path` (with permissions
    `perm`) only when the block ends without an exception."""
    target = Path(path)
    folder = target.parent
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), perm)
            else:  # pragma: no cover - Windows
                os.chmod(tmp, perm)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> None:
    """Replace `path` with `data` (str is written as UTF-8) atomically and durably, with
    permissions `mode`. On failure the old file is untouched and no temporary is left."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, perm=mode) as fh:
        fh.write(raw)


@contextmanager
def locked(lock_path: str | os.PathLike[str], timeout_s: float = 10.0) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created beside the file it guards) across
    processes for the block; TimeoutError when another holder keeps it `timeout_s`.

    For a read-modify-write of a file that several processes change: take the lock,
    read the file again, change only what this writer means to, write it atomically."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        refused = _not_regular(lock_path, os.fstat(fd).st_mode)
        if refused is not None:
            raise refused
        if fcntl is not None:
            give_up = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > give_up:
                        raise TimeoutError(f"{lock_path}: held by another process for "
                                           f"{timeout_s:g} s") from None
                    time.sleep(0.005)
        yield  # closing the descriptor releases the lock, also when the block raises
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the
    system or the file system cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # old kernel, or its file system
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(new: Path, target: Path, aside: Path) -> None:
    """`new` becomes `target`; an existing `target` ends at `aside` (for the caller to
    remove). The two folders are swapped in one step where the system can, so a crash
    at any moment leaves the old or the new folder at `target`; elsewhere the old one is
    moved aside first, and a crash between the two renames leaves it at `aside`."""
    if not (target.exists() or target.is_symlink()):
        os.rename(new, target)
    elif _exchange(new, target):
        os.rename(new, aside)  # `new` now holds the old folder
    else:
        os.rename(target, aside)
        os.rename(new, target)
