"""Tiny WASI guests for the folder-grant tests, written as a list of steps.

Each step is one WASI call (or a loop of them) with constant arguments; its errno
lands in the call's answer, a MessagePack map whose `value` is a fixed binary of
RESULT_BYTES: errno of step i at 4*i, a counter per loop step after the errnos,
and what `read` steps read at READ_AT. Opened fds are kept in slots: an `fd`
argument is an int (a preopen: 3) or "s<k>" (the fd step k opened).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from wasmext.sandbox.wasi import SIGNATURES
from wasmext.testing import DATA_AT, guest_wat, packed

RESULT_BYTES = 1024
READ_AT = 256          # inside the result
FDS = 60000            # fd slots
SCRATCH = 61000        # iovecs, counts, stat buffers
BIG = 131072           # a 64 KiB buffer for write floods
RIGHTS_READ = (1 << 30) - 1 & ~((1 << 6) | (1 << 22))
RIGHTS_RW = (1 << 30) - 1
CREAT, DIRECTORY, EXCL, TRUNC = 1, 2, 4, 8
RESPONSE_AT = 4096
_RESPONSE = msgpack.packb({"ok": True, "value": b"\0" * RESULT_BYTES})
RESULT_AT = RESPONSE_AT + len(_RESPONSE) - RESULT_BYTES


@dataclass
class Script:
    """Steps of one guest call; `wat()` is the whole guest."""

    steps: list[str] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)

    def _str(self, text: str | bytes) -> tuple[int, int]:
        raw = text.encode() if isinstance(text, str) else text
        at = DATA_AT + len(self.data)
        self.data += raw + b"\0"
        return at, len(raw)

    def _fd(self, fd: int | str) -> str:
        if isinstance(fd, int):
            return f"(i32.const {fd})"
        return f"(i32.load (i32.const {FDS + 4 * int(fd[1:])}))"

    def _errno(self, call: str) -> int:
        i = len(self.steps)
        self.steps.append(f"(i32.store (i32.const {RESULT_AT + 4 * i}) {call})")
        return i

    def open(self, path: str | bytes, oflags: int = 0, rights: int = RIGHTS_READ,
             fdflags: int = 0, fd: int | str = 3) -> str:
        """path_open; the slot name of the new fd."""
        at, n = self._str(path)
        slot = len(self.steps)
        self._errno(f"(call $path_open {self._fd(fd)} (i32.const 0) (i32.const {at}) "
                    f"(i32.const {n}) (i32.const {oflags}) (i64.const {rights}) "
                    f"(i64.const {rights}) (i32.const {fdflags}) (i32.const {FDS + 4 * slot}))")
        return f"s{slot}"

    def read(self, fd: int | str, n: int = 512, offset: int = 0) -> int:
        """fd_read of up to n bytes into READ_AT+offset of the result."""
        iov = SCRATCH + 8 * len(self.steps)
        return self._errno(
            f"(i32.store (i32.const {iov}) (i32.const {RESULT_AT + READ_AT + offset})) "
            f"(i32.store (i32.const {iov + 4}) (i32.const {n})) "
            f"(call $fd_read {self._fd(fd)} (i32.const {iov}) (i32.const 1) "
            f"(i32.const {SCRATCH + 900}))")

    def write(self, fd: int | str, text: bytes) -> int:
        """fd_write of `text`."""
        at, n = self._str(text)
        iov = SCRATCH + 8 * len(self.steps)
        return self._errno(
            f"(i32.store (i32.const {iov}) (i32.const {at})) "
            f"(i32.store (i32.const {iov + 4}) (i32.const {n})) "
            f"(call $fd_write {self._fd(fd)} (i32.const {iov}) (i32.const 1) "
            f"(i32.const {SCRATCH + 904}))")

    def close(self, fd: int | str) -> int:
        """fd_close."""
        return self._errno(f"(call $fd_close {self._fd(fd)})")

    def path(self, op: str, path: str | bytes, fd: int | str = 3) -> int:
        """path_create_directory, path_unlink_file or path_remove_directory."""
        at, n = self._str(path)
        return self._errno(f"(call ${op} {self._fd(fd)} (i32.const {at}) (i32.const {n}))")

    def rename(self, old: str, new: str) -> int:
        """path_rename inside fd 3."""
        a, an = self._str(old)
        b, bn = self._str(new)
        return self._errno(f"(call $path_rename (i32.const 3) (i32.const {a}) (i32.const {an}) "
                           f"(i32.const 3) (i32.const {b}) (i32.const {bn}))")

    def link(self, old: str, new: str) -> int:
        """path_link inside fd 3."""
        a, an = self._str(old)
        b, bn = self._str(new)
        return self._errno(f"(call $path_link (i32.const 3) (i32.const 0) (i32.const {a}) "
                           f"(i32.const {an}) (i32.const 3) (i32.const {b}) (i32.const {bn}))")

    def stat(self, path: str, into: int) -> int:
        """path_filestat_get; the 64-byte filestat at READ_AT+into of the result."""
        at, n = self._str(path)
        return self._errno(f"(call $path_filestat_get (i32.const 3) (i32.const 0) "
                           f"(i32.const {at}) (i32.const {n}) "
                           f"(i32.const {RESULT_AT + READ_AT + into}))")

    def prestat_name(self, fd: int, into: int) -> int:
        """fd_prestat_get then fd_prestat_dir_name into READ_AT+into."""
        return self._errno(f"(call $fd_prestat_get (i32.const {fd}) (i32.const {SCRATCH + 910}))"
                           f"(drop (call $fd_prestat_dir_name (i32.const {fd}) "
                           f"(i32.const {RESULT_AT + READ_AT + into}) "
                           f"(i32.load (i32.const {SCRATCH + 914}))))")

    def readdir(self, fd: int | str, into: int, size: int = 400) -> int:
        """fd_readdir from cookie 0 into READ_AT+into."""
        return self._errno(f"(call $fd_readdir {self._fd(fd)} (i32.const "
                           f"{RESULT_AT + READ_AT + into}) (i32.const {size}) (i64.const 0) "
                           f"(i32.const {SCRATCH + 920}))")

    def flood_files(self, prefix: str, count: int) -> int:
        """Create prefix0000.. until an errno or `count` files; errno and files made."""
        at, n = self._str(prefix + "0000")
        i = len(self.steps)
        res, counter = RESULT_AT + 4 * i, RESULT_AT + 4 * i + 128
        digits = "".join(
            f"(i32.store8 (i32.const {at + n - 4 + k}) (i32.add (i32.const 48) "
            f"(i32.rem_u (i32.div_u (local.get $i) (i32.const {10 ** (3 - k)})) "
            f"(i32.const 10))))" for k in range(4))
        self.steps.append(f"""
        (local.set $i (i32.const 0))
        (block $done (loop $next
          {digits}
          (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const {at})
            (i32.const {n}) (i32.const {CREAT}) (i64.const {RIGHTS_RW}) (i64.const {RIGHTS_RW})
            (i32.const 0) (i32.const {SCRATCH + 930})))
          (i32.store (i32.const {res}) (local.get $e))
          (br_if $done (local.get $e))
          (drop (call $fd_close (i32.load (i32.const {SCRATCH + 930}))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (i32.store (i32.const {counter}) (local.get $i))
          (br_if $next (i32.lt_u (local.get $i) (i32.const {count})))))""")
        return i

    def flood_bytes(self, fd: int | str, chunks: int, op: str = "fd_write") -> int:
        """fd_write (or fd_read) 64 KiB chunks until an errno or `chunks` calls; errno
        and calls."""
        i = len(self.steps)
        res, counter = RESULT_AT + 4 * i, RESULT_AT + 4 * i + 128
        self.steps.append(f"""
        (i32.store (i32.const {SCRATCH + 940}) (i32.const {BIG}))
        (i32.store (i32.const {SCRATCH + 944}) (i32.const 65536))
        (local.set $i (i32.const 0))
        (block $done (loop $next
          (local.set $e (call ${op} {self._fd(fd)} (i32.const {SCRATCH + 940})
            (i32.const 1) (i32.const {SCRATCH + 948})))
          (i32.store (i32.const {res}) (local.get $e))
          (br_if $done (local.get $e))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (i32.store (i32.const {counter}) (local.get $i))
          (br_if $next (i32.lt_u (local.get $i) (i32.const {chunks})))))""")
        return i

    def race_reads(self, path: str, rounds: int, marker: int) -> int:
        """Open, read 1 byte, close `path` `rounds` times; counts opens that worked and
        reads that saw `marker` as the first byte (at 4*i+128 and 4*i+132)."""
        at, n = self._str(path)
        i = len(self.steps)
        ok, seen = RESULT_AT + 4 * i + 128, RESULT_AT + 4 * i + 132
        self.steps.append(f"""
        (local.set $i (i32.const 0))
        (block $done (loop $next
          (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const {at})
            (i32.const {n}) (i32.const 0) (i64.const {RIGHTS_READ}) (i64.const {RIGHTS_READ})
            (i32.const 0) (i32.const {SCRATCH + 950})))
          (if (i32.eqz (local.get $e)) (then
            (i32.store (i32.const {ok}) (i32.add (i32.load (i32.const {ok})) (i32.const 1)))
            (i32.store8 (i32.const {SCRATCH + 960}) (i32.const 0))
            (i32.store (i32.const {SCRATCH + 964}) (i32.const {SCRATCH + 960}))
            (i32.store (i32.const {SCRATCH + 968}) (i32.const 1))
            (drop (call $fd_read (i32.load (i32.const {SCRATCH + 950})) (i32.const {SCRATCH + 964})
              (i32.const 1) (i32.const {SCRATCH + 972})))
            (if (i32.eq (i32.load8_u (i32.const {SCRATCH + 960})) (i32.const {marker})) (then
              (i32.store (i32.const {seen}) (i32.add (i32.load (i32.const {seen}))
                                                     (i32.const 1)))))
            (drop (call $fd_close (i32.load (i32.const {SCRATCH + 950}))))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $next (i32.lt_u (local.get $i) (i32.const {rounds})))))""")
        return i

    def race_writes(self, path: str, rounds: int) -> int:
        """Create-or-open `path` for writing and write 'pwned' `rounds` times."""
        at, n = self._str(path)
        text, tn = self._str(b"pwned")
        self.steps.append(f"""
        (local.set $i (i32.const 0))
        (block $done (loop $next
          (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const {at})
            (i32.const {n}) (i32.const {CREAT | TRUNC}) (i64.const {RIGHTS_RW})
            (i64.const {RIGHTS_RW}) (i32.const 0) (i32.const {SCRATCH + 980})))
          (if (i32.eqz (local.get $e)) (then
            (i32.store (i32.const {SCRATCH + 984}) (i32.const {text}))
            (i32.store (i32.const {SCRATCH + 988}) (i32.const {tn}))
            (drop (call $fd_write (i32.load (i32.const {SCRATCH + 980}))
              (i32.const {SCRATCH + 984}) (i32.const 1) (i32.const {SCRATCH + 992})))
            (drop (call $fd_close (i32.load (i32.const {SCRATCH + 980}))))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $next (i32.lt_u (local.get $i) (i32.const {rounds})))))""")
        return len(self.steps) - 1

    def wat(self) -> str:
        """The guest: every step in its one hook call, then the result."""
        imports = "\n".join(
            f'(import "wasi_snapshot_preview1" "{name}" (func ${name} '
            f'(param {" ".join(params)}) (result i32)))'
            for name, (params, _) in SIGNATURES.items()
            if name in ("path_open", "fd_read", "fd_write", "fd_close", "path_create_directory",
                        "path_unlink_file", "path_remove_directory", "path_rename",
                        "path_link", "path_filestat_get", "fd_prestat_get",
                        "fd_prestat_dir_name", "fd_readdir"))
        body = ("(local $i i32) (local $e i32)\n"
                f"(memory.fill (i32.const {RESULT_AT}) (i32.const 0) (i32.const {RESULT_BYTES}))"
                + "\n".join(self.steps) + f"\n(i64.const {packed(RESPONSE_AT, len(_RESPONSE))})")
        return guest_wat(body, response={"ok": True, "value": b"\0" * RESULT_BYTES},
                         imports=imports, data=bytes(self.data), memory_pages=3)


def errno(value: bytes, step: int) -> int:
    """The errno step `step` answered."""
    return int(struct.unpack_from("<I", value, 4 * step)[0])


def counter(value: bytes, step: int, extra: int = 0) -> int:
    """The count a loop step kept (`extra` 4: the second one)."""
    return int(struct.unpack_from("<I", value, 4 * step + 128 + extra)[0])


def read_back(value: bytes, into: int = 0, n: int = 512) -> bytes:
    """What a read step put at READ_AT+into."""
    return bytes(value[READ_AT + into:READ_AT + into + n]).rstrip(b"\0")


def filestat(value: bytes, into: int) -> dict[str, Any]:
    """A filestat a stat step wrote at READ_AT+into."""
    _dev, _ino, ftype, nlink, size = struct.unpack_from("<QQBxxxxxxxQQ", value, READ_AT + into)
    return {"type": ftype, "nlink": nlink, "size": size}


def many_iovecs(script: Script, fd: int | str) -> int:
    """fd_write of 1024 iovecs, each naming all of memory; the count written lands at
    4*i+128 of the result (the errno at 4*i)."""
    i = len(script.steps)
    script.steps.append(f"""
        (local.set $i (i32.const 0))
        (loop $next
          (i32.store (i32.add (i32.const {BIG}) (i32.mul (local.get $i) (i32.const 8)))
                     (i32.const 0))
          (i32.store (i32.add (i32.const {BIG + 4}) (i32.mul (local.get $i) (i32.const 8)))
                     (i32.mul (memory.size) (i32.const 65536)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $next (i32.lt_u (local.get $i) (i32.const 1024))))
        (i32.store (i32.const {RESULT_AT + 4 * i}) (call $fd_write {script._fd(fd)}
          (i32.const {BIG}) (i32.const 1024) (i32.const {RESULT_AT + 4 * i + 128})))""")
    return i


def hold_open(script: Script, path: str, count: int) -> int:
    """Open `path` `count` times without closing; the first errno and the opens that
    worked (at 4*i and 4*i+128)."""
    at, n = script._str(path)
    i = len(script.steps)
    res, opened = RESULT_AT + 4 * i, RESULT_AT + 4 * i + 128
    script.steps.append(f"""
        (local.set $i (i32.const 0))
        (block $done (loop $next
          (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const {at})
            (i32.const {n}) (i32.const 0) (i64.const {RIGHTS_READ}) (i64.const {RIGHTS_READ})
            (i32.const 0) (i32.const {SCRATCH + 996})))
          (i32.store (i32.const {res}) (local.get $e))
          (br_if $done (local.get $e))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (i32.store (i32.const {opened}) (local.get $i))
          (br_if $next (i32.lt_u (local.get $i) (i32.const {count})))))""")
    return i
