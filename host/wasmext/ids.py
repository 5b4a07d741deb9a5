"""Random ids (session, trace, NATS call ids) without a system call per id.

`uuid.uuid4()` reads 16 bytes of `os.urandom` per id: a system call, during which
the calling thread gives up the GIL. On an event loop beside busy worker threads,
getting it back can take a whole switch interval (5 ms) per id: 1,000 sessions
entered at once kept the loop from running for hundreds of milliseconds. Here each
thread reads 4 KiB of `os.urandom` at a time and cuts 128-bit ids from it: as
unpredictable as uuid4's (an idempotency key must not be guessable), one system
call per 256 ids. A forked child drops the bytes it inherited, so it never repeats
its parent's ids.
"""

from __future__ import annotations

import os
import threading

__all__ = ["random_hex"]

_CHUNK = 4096
_ID = 16


class _Bytes(threading.local):
    def __init__(self) -> None:
        self.buf = b""
        self.at = 0


_local = _Bytes()


def random_hex() -> str:
    """32 hex digits of fresh randomness, like `uuid.uuid4().hex` (without its version bits)."""
    local = _local
    at = local.at
    if at + _ID > len(local.buf):
        local.buf, at = os.urandom(_CHUNK), 0
    local.at = at + _ID
    return local.buf[at:at + _ID].hex()


def _forget() -> None:
    _local.buf, _local.at = b"", 0  # the child must not cut the parent's ids again


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget)
