"""kill -9 a process that commits in a loop; every acknowledged commit must survive intact."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wasmext.state import Scope

CHILD = Path(__file__).with_name("crash_child.py")
sys.path.insert(0, str(CHILD.parent))
from crash_child import LIMITS, SCOPE, open_store, payload  # noqa: E402

CYCLES = 20
BUDGET_SECONDS = 30


def read_acks(path: Path) -> tuple[bool, list[int]]:
    """Whether the child got ready, and the indexes it acknowledged (a torn last line is
    not an acknowledgement)."""
    if not path.exists():
        return False, []
    lines = path.read_bytes().split(b"\n")[:-1]
    return b"ready" in lines, [int(x) for x in lines if x != b"ready"]


def check(db: str, acked: list[int]) -> int:
    """Open the store as a restarted host would and verify it; the last committed index."""
    if not db.startswith("nats://"):
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    store = open_store(db)
    try:
        raw_last = store.get(Scope(SCOPE.plugin), "last")
        last = -1 if raw_last is None else int(raw_last)
        keys = store.keys(SCOPE)
        present = sorted(int(k[1:]) for k in keys)
        # atomic commits: k0..k<last> exist, nothing beyond (each commit wrote both)
        assert present == list(range(last + 1)), (present[-3:], last)
        for i in present:  # no torn or corrupt value
            assert store.get(SCOPE, f"k{i}") == payload(i, db), i
        for i in acked:  # durable commits: every acknowledged one is there
            assert i <= last, (i, last)
        usage = store.usage(SCOPE)
        assert usage.scope_keys == last + 1
        assert usage.scope_bytes == sum(LIMITS.entry_size(f"k{i}", payload(i, db))
                                        for i in range(last + 1))
        return last
    finally:
        store.close()


# The JetStream loop (a commit takes a server round trip and its sync) is a kill loop
# of the slow tier; SQLite's runs in a few seconds.
@pytest.mark.parametrize("backend", ["sqlite",
                                     pytest.param("jetstream", marks=pytest.mark.slow)])
def test_kill_9_loses_no_committed_write(tmp_path: Path, backend: str,
                                         request: pytest.FixtureRequest) -> None:
    """SQLite: a file; JetStream: a bucket of a real nats-server (each commit one atomic
    batch): the writer is killed mid-commit, and what is left is before or after it."""
    db = request.getfixturevalue("jetstream_url") if backend == "jetstream" \
        else str(tmp_path / "state.db")
    rng = random.Random(1234)
    zygote = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert zygote.stdin is not None and zygote.stdout is not None

    def ask(command: str) -> int:
        zygote.stdin.write(command + "\n")  # type: ignore[union-attr]
        zygote.stdin.flush()  # type: ignore[union-attr]
        return int(zygote.stdout.readline())  # type: ignore[union-attr]

    started = time.monotonic()
    last, total_acked, cycles = -1, 0, 0
    try:
        while cycles < CYCLES and time.monotonic() - started < BUDGET_SECONDS:
            ack_path = tmp_path / f"ack{cycles}"
            pid = ask(f"run {db} {ack_path} {last + 1}")
            deadline = time.monotonic() + 10
            while not read_acks(ack_path)[0]:  # it is writing: kill it at a random moment
                assert time.monotonic() < deadline, "the writer never got ready"
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.1))
            os.kill(pid, signal.SIGKILL)
            status = ask(f"reap {pid}")
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            ready, acked = read_acks(ack_path)
            assert ready
            total_acked += len(acked)
            new_last = check(db, acked)
            assert new_last >= last
            last = new_last
            cycles += 1
    finally:
        zygote.stdin.close()
        zygote.wait(10)
    assert cycles >= 5, "too few kill cycles ran within the time budget"
    assert total_acked > 0
    print(f"{backend}: {cycles} kills, {total_acked} acknowledged commits, last {last}")
