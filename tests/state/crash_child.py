"""The victim of test_state_crash.py: commit in a loop, acknowledge each commit, never stop.

    python crash_child.py            (a zygote: reads commands on stdin)
    run <db> <ack file> <first>  ->  forks a writer, answers its pid
    reap <pid>                   ->  waits for it, answers its wait status

The zygote imports wasmext once, so that each writer starts in a millisecond.
A writer commits in a loop: each transaction writes `k<i>` (session "s") and sets
the plugin-global `last` to i; only after commit() returned is `i` appended to
the ack file (one write(2): there for any reader even after a kill -9).
"""

from __future__ import annotations

import hashlib
import os
import sys

from wasmext.state import Scope, SQLiteStore, StateLimits

LIMITS = StateLimits(max_keys=1_000_000, max_session_bytes=1 << 30, max_plugin_bytes=1 << 30)
SCOPE = Scope("crash", "s")


def payload(i: int) -> bytes:
    """A value whose every byte depends on i, 32 to ~4 KiB long: a torn write shows."""
    seed = hashlib.sha256(b"%d" % i).digest()
    return (seed * (1 + i % 128))[: 32 + (i * 37) % 4000]


def writer(db: str, ack_path: str, first: int) -> None:
    store = SQLiteStore(db, LIMITS)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(ack, b"ready\n")
    i = first
    while True:
        with store.begin(SCOPE.plugin, SCOPE.session) as txn:
            txn.set(f"k{i}", payload(i))
            txn.set("last", b"%d" % i, scope="plugin")
        os.write(ack, b"%d\n" % i)
        i += 1


def zygote() -> None:
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "run":
            pid = os.fork()
            if pid == 0:
                try:
                    writer(args[0], args[1], int(args[2]))
                finally:
                    os._exit(70)
            print(pid, flush=True)
        elif cmd == "reap":
            print(os.waitpid(int(args[0]), 0)[1], flush=True)


if __name__ == "__main__":
    zygote()
