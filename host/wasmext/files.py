"""Writing files a user relies on: all or nothing, whatever moment the process dies.

`atomic_write(path, data)` (and `atomic_open(path)` for writers that stream)
writes a temporary file in the target's folder, flushes it to disk, renames it
over the target and flushes the folder. A reader, or the next run after a
`kill -9` or a power loss, finds the complete old file or the complete new one,
never a truncated or empty file. On an error the temporary file is removed and
the old file is untouched; only a killed process can leave a hidden
`.<name>.tmp-*` file behind, never the target half-written.

A leaf module: it imports nothing of wasmext.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

__all__ = ["atomic_open", "atomic_write", "durable_replace", "fsync_dir"]


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
