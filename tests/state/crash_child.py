"""The victim of test_state_crash.py: commit in a loop, acknowledge each commit, never stop.

    python crash_child.py            (a zygote: reads commands on stdin)
    run <db> <ack file> <first>  ->  forks a writer, answers its pid
                                    (<db>: a SQLite file, or a nats:// url: JetStream)
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

import wasmext.state.jetstream.store  # noqa: F401  (imported once, for the forks)
from wasmext.state import Scope, SQLiteStore, StateLimits, StateStore

LIMITS = StateLimits(max_keys=1_000_000, max_session_bytes=1 << 30, max_plugin_bytes=1 << 30)
SCOPE = Scope("crash", "s")
BUCKET = "crash"


def payload(i: int, where: str = "") -> bytes:
    """A value whose every byte depends on i, 32 to ~4 KiB long: a torn write shows.
    (At most 256 bytes in JetStream, whose one session document must fit max_payload.)"""
    seed = hashlib.sha256(b"%d" % i).digest()
    value = (seed * (1 + i % 128))[: 32 + (i * 37) % 4000]
    return value[:256] if where.startswith("nats://") else value


def open_store(where: str) -> StateStore:
    """The store at `where`: a SQLite file, or the JetStream bucket of a nats:// server."""
    if where.startswith("nats://"):
        from wasmext.state.jetstream.store import JetStreamStore

        store = JetStreamStore(where, LIMITS, bucket=BUCKET)
        store.connect()  # connected before "ready": the kills land in commits
        return store
    return SQLiteStore(where, LIMITS)


def writer(db: str, ack_path: str, first: int) -> None:
    store = open_store(db)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(ack, b"ready\n")
    i = first
    while True:
        with store.begin(SCOPE.plugin, SCOPE.session) as txn:
            txn.set(f"k{i}", payload(i, db))
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
